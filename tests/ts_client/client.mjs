// The official MCP TypeScript SDK v2 client (@modelcontextprotocol/client,
// pinned in package.json) against a live `up` or `mcp_stdio`.
// tests/test_ts_client.py runs it:
//
//     node tests/ts_client/client.mjs MODE http URL TOKEN ROOT WATCHED
//     node tests/ts_client/client.mjs MODE stdio PYTHON MANAGE_PY ROOT WATCHED
//
// MODE is the client's versionNegotiation mode: "2026-07-28" (pinned: the
// stateless revision), "auto" (probes server/discover) or "legacy"
// (initialize and a session); the pinned mode too asks server/discover at
// connect, but falls back to nothing. It lists the tools, searches, opens the first
// hit's file (2026-07-28 mirrors its rel_path as Mcp-Param-Path) and reads it
// as a resource; then it waits for a change to WATCHED (a path under ROOT):
// through subscriptions/listen on the 2026-07-28 era, through
// resources/subscribe on a legacy session. It writes the file itself once the
// subscription is in place and prints one JSON object with what it saw,
// every HTTP exchange included (method, Mcp-Method and Mcp-Param-Path
// headers, status; none over stdio). It
// imports nothing of dir2mcp.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const WAIT_MS = 120_000;

function waitFor(promise, what) {
    let timer;
    const timeout = new Promise((_resolve, reject) => {
        timer = setTimeout(() => reject(new Error(`no ${what} within ${WAIT_MS} ms`)), WAIT_MS);
    });
    return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function main() {
    const [mode, transportName, ...rest] = process.argv.slice(2);
    const negotiation = mode === 'auto' || mode === 'legacy' ? mode : { pin: mode };
    const client = new Client(
        { name: 'dir2mcp-ts-client-test', version: '1.0.0' },
        { versionNegotiation: { mode: negotiation } }
    );
    // Every HTTP exchange the client makes: its method, Mcp-Method and Mcp-Param-Path headers, status.
    const exchanges = [];
    const recording = async (input, init) => {
        const response = await fetch(input, init);
        const headers = new Headers(init?.headers);
        exchanges.push([init?.method ?? 'GET', headers.get('mcp-method'), headers.get('mcp-param-path'), response.status]);
        return response;
    };
    let transport, root, watched;
    if (transportName === 'http') {
        let url, token;
        [url, token, root, watched] = rest;
        transport = new StreamableHTTPClientTransport(new URL(url), {
            authProvider: { token: async () => token },
            fetch: recording
        });
    } else {
        let python, manage;
        [python, manage, root, watched] = rest;
        transport = new StdioClientTransport({
            command: python,
            args: [manage, 'mcp_stdio', '--dir', root],
            env: process.env,
            stderr: 'inherit'
        });
    }
    await client.connect(transport);

    const tools = (await client.listTools()).tools;
    const found = await client.callTool({ name: 'dir2mcp.search', arguments: { query: 'parse config file', k: 3 } });
    const hit = found.structuredContent.hits[0];
    const opened = await client.callTool({ name: 'dir2mcp.open_file', arguments: { rel_path: hit.rel_path } });
    const read = await client.readResource({ uri: `dir2mcp:///${hit.rel_path}` });

    const watchedUri = `dir2mcp:///${watched}`;
    let resolveUpdated;
    const updated = new Promise(resolve => (resolveUpdated = resolve));
    client.setNotificationHandler('notifications/resources/updated', notification => {
        if (notification.params.uri === watchedUri) resolveUpdated(notification.params);
    });
    let honored = null;
    let subscription = null;
    if (client.getProtocolEra() === 'modern') {
        subscription = await client.listen({ resourceSubscriptions: [watchedUri], resourcesListChanged: true });
        honored = subscription.honoredFilter;
    } else {
        await client.subscribeResource({ uri: watchedUri });
    }
    // New content each run: live sync reports a change of content, not a mere write.
    writeFileSync(join(root, watched), `changed by the ${mode} TypeScript client at ${new Date().toISOString()}\n`);
    const update = await waitFor(updated, `notifications/resources/updated for ${watchedUri}`);
    let closedAs = null;
    if (subscription) {
        await subscription.close();
        closedAs = await subscription.closed;
    }

    const seen = {
        era: client.getProtocolEra(),
        protocol_version: client.getNegotiatedProtocolVersion(),
        session_id: transport.sessionId ?? null,
        server: client.getServerVersion()?.name ?? null,
        tools: tools.map(tool => tool.name).sort(),
        search_is_error: Boolean(found.isError),
        hit: hit.rel_path,
        open_file_is_error: Boolean(opened.isError),
        open_file_content: opened.structuredContent?.content ?? '',
        resource_text: read.contents[0].text,
        listen_honored: honored,
        listen_closed: closedAs,
        updated_uri: update.uri
    };
    if (transport.sessionId) await transport.terminateSession(); // DELETE: the client does not on close()
    await client.close();
    seen.http = exchanges;
    console.log(JSON.stringify(seen));
}

main().catch(error => {
    console.error(error?.stack ?? String(error));
    process.exit(1);
});
