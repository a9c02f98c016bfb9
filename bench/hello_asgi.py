"""The reference for ``bench/big_tree.py --initialize``: the smallest ASGI
app daphne can serve, so that a start of daphne itself (Python, twisted,
daphne) is measured beside ``up`` in the same run."""


async def application(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b'{"jsonrpc": "2.0", "id": 1, "result": {}}'})
