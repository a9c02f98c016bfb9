"""The fake providers run as real HTTP processes, for end-to-end tests and the benchmark."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from tests.fakes.media import make_wav
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
