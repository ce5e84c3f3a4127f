"""launch/serve.py in its own process: serves a saved policy, drains on SIGTERM.

Slow (about 90 s on a loaded 2-core CPU: a fresh process imports JAX, loads the policy and
compiles the engine on its first request), so outside the default run: `pytest -m slow`.
"""

import concurrent.futures
import os
import signal
import subprocess
import sys

import httpx
import openai
import pytest

from agentrl_jax.experiment.policy import Policy, save_policy
from tests.serving.conftest import _free_port, wait_until


@pytest.mark.slow
def test_serves_a_checkpoint_and_drains_on_sigterm(stack, tmp_path):
    model_dir = save_policy(Policy(stack.text_model, stack.tokenizer, "hermes"),
                            tmp_path / "chatty")
    port = _free_port()
    env = {**os.environ, "AGENTRL_SERVE_API_KEY": "k"}
    process = subprocess.Popen(
        [sys.executable, "-m", "launch.serve", f"--checkpoint={model_dir}", f"--port={port}",
         "--max_context=384", "--num_pages=48", "--max_batch=2", "--warmup=false"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            assert process.poll() is None, process.stdout.read()
            try:
                return httpx.get(f"{url}/health").status_code == 200
            except httpx.TransportError:
                return False

        wait_until(up, timeout=300)
        client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0, timeout=300)
        assert [m.id for m in client.models.list().data] == ["chatty"]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            # The first request compiles the engine's shapes: it is in flight for a while.
            pending = pool.submit(client.chat.completions.create, model="chatty",
                                  messages=[{"role": "user", "content": "hi"}], max_tokens=200,
                                  temperature=0)
            wait_until(lambda: httpx.get(f"{url}/health").json()["in_flight"] == 1)
            process.send_signal(signal.SIGTERM)
            response = pending.result()
        assert response.usage.completion_tokens == 200
        assert response.choices[0].message.content.startswith("Hello there, friend.")
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
