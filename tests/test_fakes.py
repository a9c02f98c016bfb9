"""The fake providers run as real HTTP processes, for end-to-end tests and the benchmark."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import numpy as np
import pytest

from corpus.providers.mistral import MistralEmbedder
from kernel.config import Config
from tests.fakes.media import make_wav
from tests.fakes.mistral import FakeMistral, FastFakeMistral
from tests.mcp_http import REPO
from tests.support import TLS


@pytest.mark.parametrize(
    ("module", "path", "auth"),
    [
        pytest.param("tests.fakes.mistral", "/v1/audio/transcriptions", "Authorization", id="mistral"),
        pytest.param("tests.fakes.elevenlabs", "/v1/speech-to-text", "xi-api-key", id="elevenlabs"),
    ],
)
def test_a_fake_serves_from_its_own_process(module: str, path: str, auth: str) -> None:
    proc = subprocess.Popen([sys.executable, "-m", module], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        key = f"Bearer {info['api_key']}" if auth == "Authorization" else info["api_key"]
        model = {"model": "voxtral-mini-latest"} if "mistral" in module else {"model_id": "scribe_v1"}
        files = {"file": ("a.wav", make_wav([(0.0, 1.0, "hello there")]), "audio/wav")}

        denied = httpx.post(info["url"] + path, data=model, files=files, timeout=10, verify=TLS)
        answer = httpx.post(
            info["url"] + path, data=model, files=files, headers={auth: key}, timeout=10, verify=TLS
        )
        extra = httpx.post(
            info["url"] + path, data={**model, "bogus": "1"}, files=files, headers={auth: key}, verify=TLS
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()

    assert denied.status_code == 401
    assert answer.status_code == 200 and answer.json()["text"] == "hello there"
    assert extra.status_code == 422


def test_the_fast_fake_answers_embeddings_as_the_fake_does_without_recording() -> None:
    # The bulk benchmark's fake (bench/big_tree.py --embed fake): the product's
    # Mistral embedder reads its answers, which have the fake's keys, and the
    # texts sent are not kept (a million of them would be the whole corpus).
    exact, fast = FakeMistral().start(), FastFakeMistral().start()
    try:
        for fake in (exact, fast):
            fake.dims["bench-code-384"] = 384
        body = {"model": "bench-code-384", "input": ["int x;", "static int a_probe(void)", "é"]}
        answers = [
            httpx.post(
                f"{fake.url}/v1/embeddings", json=body, headers={"Authorization": f"Bearer {fake.api_key}"}
            ).json()
            for fake in (exact, fast)
        ]
        config = Config.model_validate(
            {"mistral": {"base_url": fast.url, "embed_code_model": "bench-code-384"}}
        )
        embedder = MistralEmbedder(config, api_key=fast.api_key)
        vectors = embedder.embed([f"unit {i}" for i in range(70)], kind="code")
        bad = httpx.post(
            f"{fast.url}/v1/embeddings",
            json={**body, "bogus": 1},
            headers={"Authorization": f"Bearer {fast.api_key}"},
        )
    finally:
        exact.close()
        fast.close()

    assert answers[0].keys() == answers[1].keys()
    assert [item.keys() for item in answers[0]["data"]] == [item.keys() for item in answers[1]["data"]]
    assert [item["index"] for item in answers[1]["data"]] == [0, 1, 2]
    assert answers[0]["usage"] == answers[1]["usage"]
    assert vectors.shape == (70, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert len({row.tobytes() for row in vectors}) == 70
    assert bad.status_code == 422
    assert fast.requests == [] and len(exact.requests) == 1
