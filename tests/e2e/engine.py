"""A real vLLM engine on this CPU, in a process of its own, with s3kv's tier (or another).

The test (or bench/bench_ttft.py) builds a small random Llama with :func:`build_model`,
then calls :func:`run_engine` once per engine life: it starts ``python -m
tests.e2e.engine`` with a JSON job, which builds ``vllm.LLM`` with the
``OffloadingConnector`` and the requested secondary tier, generates greedily for each
prompt (token ids, so no tokenizer is involved), shuts the engine down and prints one
JSON line: the tokens, ``num_cached_tokens`` and the seconds each prompt took.

:class:`Session` is an engine life the test drives step by step (the job's
``interactive``): the engine reads one step at a time from its stdin (prompts generated
together in one batch, after an optional reset of vLLM's prefix cache and the offloading
tiers' CPU copy), answers each with one JSON line, and waits for the next; the test
changes the world between steps (a fault proxy's phase).

Nothing is downloaded: the weights are random, the tokenizer a local WordLevel one.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULT_TAG = "S3KV_E2E_RESULT "
STEP_TAG = "S3KV_E2E_STEP "
READY_TAG = "S3KV_E2E_READY"
PLUGIN_DIST = "s3kv_e2e_cpu_offload-0.32.0.dist-info"

TINY = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 4096}
"""The end-to-end test's model: 17 MB in float32, fast to prefill."""


def build_model(path: Path, *, seed: int = 0, dtype: str = "float32", **shape: int) -> Path:
    """A random-weight Llama (safetensors) and a WordLevel tokenizer in ``path``.

    float32 by default: a random model's logits are nearly flat, and bfloat16's rounding
    differs between a full prefill and one over loaded KV enough to flip a greedy pick.
    """
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    dims = {**TINY, **shape}
    if (path / "config.json").exists():
        return path
    torch.manual_seed(seed)
    config = LlamaConfig(max_position_embeddings=8192, torch_dtype=dtype,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, **dims)
    model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(path, safe_serialization=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"w{i}": i for i in range(3, dims["vocab_size"])})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(path)
    return path


def plugin_path(tmp: Path) -> Path:
    """A directory that registers tests/e2e/cpu_offload.py as a vLLM general plugin."""
    dist = tmp / PLUGIN_DIST
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: s3kv-e2e-cpu-offload\nVersion: 0.32.0\n")
    (dist / "entry_points.txt").write_text(
        "[vllm.general_plugins]\ns3kv_cpu_offload = tests.e2e.cpu_offload:register\n")
    return tmp


def engine_env(tmp: Path, *, multiprocess: bool, extra: dict[str, str] | None = None,
               ) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(plugin_path(tmp / "plugin"))]),
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "2"),
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1" if multiprocess else "0",
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    })
    env.update(extra or {})
    return env


def run_engine(job: dict[str, Any], *, env: dict[str, str], timeout: float = 600.0,
               ) -> dict[str, Any]:
    """One engine life in a fresh process; its result, its log and its CPU and wall time."""
    cpu0, wall0 = _children_cpu_seconds(), time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "tests.e2e.engine", json.dumps(job)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"engine exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
                           f"\n--- stderr\n{proc.stderr[-8000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len(RESULT_TAG):])
    result["log"] = proc.stdout + proc.stderr  # vLLM logs to stdout
    result["cpu_seconds"] = _children_cpu_seconds() - cpu0
    result["wall_seconds"] = time.perf_counter() - wall0
    return result


class Session:
    """One engine life driven step by step (see the module); ``with`` it, then
    :meth:`step` until done. Its log (stdout and stderr) is in ``log`` once it ended."""

    def __init__(self, job: dict[str, Any], *, env: dict[str, str], log_path: Path,
                 timeout: float = 600.0) -> None:
        self.log_path = log_path
        self.timeout = timeout
        self._err = open(log_path.with_suffix(".stderr"), "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.engine", json.dumps({**job, "interactive": True})],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._err, text=True, bufsize=1,
        )
        self.lines: list[str] = []
        self._until(READY_TAG)

    def _until(self, tag: str) -> str:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"engine exited {self.proc.wait()} before {tag!r}:\n"
                                   + "".join(self.lines[-60:]) + self.stderr()[-8000:])
            self.lines.append(line)
            if line.startswith(tag):
                return line[len(tag):]

    def step(self, prompts: list[list[int]], *, reset: bool = False,
             settle: float = 0.0, timeout: float = 120.0) -> dict[str, Any]:
        """Generate ``prompts`` in one batch; the results and the wall seconds. A step
        that takes longer than ``timeout`` ends the life (RuntimeError), not the suite."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"prompts": prompts, "reset": reset,
                                          "settle_seconds": settle}) + "\n")
        self.proc.stdin.flush()
        watchdog = threading.Timer(timeout, self.proc.kill)
        watchdog.start()
        try:
            out: dict[str, Any] = json.loads(self._until(STEP_TAG))
        finally:
            watchdog.cancel()
        return out

    def stderr(self) -> str:
        self._err.flush()
        return self.log_path.with_suffix(".stderr").read_text()

    def close(self) -> str:
        """End the life (the engine shuts down); its whole log."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        assert self.proc.stdout is not None
        self.lines.append(self.proc.stdout.read())
        self.proc.stdout.close()
        log = "".join(self.lines) + self.stderr()
        self._err.close()
        self.log_path.write_text(log)
        return log

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._err.closed:
            self.close()


def _children_cpu_seconds() -> float:
    """CPU time of finished children (the engine and, multiprocess, its core)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def kv_transfer_config(job: dict[str, Any]) -> Any:
    from vllm.config import KVTransferConfig

    tiers = job.get("secondary_tiers")
    if tiers is None:
        return None
    extra = {"spec_name": "TieringOffloadingSpec",
             "cpu_bytes_to_use": job.get("cpu_bytes_to_use", 64 << 20),
             "block_size": job.get("block_size", 128), "secondary_tiers": tiers}
    return KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both",
                            kv_connector_extra_config=extra)


def main(job: dict[str, Any]) -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    if "manifest_recheck_seconds" in job:  # the tier's uploader, in this process
        from s3kv.transfers.uploader import Uploader

        Uploader.manifest_recheck_seconds = job["manifest_recheck_seconds"]
    llm = LLM(model=job["model"], dtype=job.get("dtype", "float32"),
              max_model_len=job.get("max_model_len", 2048), enforce_eager=True, seed=0,
              kv_transfer_config=kv_transfer_config(job),
              max_num_batched_tokens=job.get("max_num_batched_tokens"))
    # What an API request's kv_transfer_params carry (a router's tenant): vLLM reads them
    # from the sampling parameters' extra_args into each request's ReqContext.
    extra = ({"kv_transfer_params": job["kv_transfer_params"]}
             if job.get("kv_transfer_params") else None)
    params = SamplingParams(temperature=0.0, max_tokens=job.get("max_tokens", 8),
                            ignore_eos=True, extra_args=extra)
    if job.get("interactive"):
        _interactive(llm, params)
        return
    results = []
    for prompt in job["prompts"]:
        t0 = time.perf_counter()
        (out,) = llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)
        seconds = time.perf_counter() - t0
        results.append({"tokens": list(out.outputs[0].token_ids),
                        "num_cached_tokens": out.num_cached_tokens, "seconds": seconds})
        # vLLM stores a request's blocks as it runs; give the tier time to finish
        # before the next request (or the shutdown) so a writer leaves them all in S3.
        time.sleep(job.get("settle_seconds", 0.0))
    llm.llm_engine.engine_core.shutdown()
    print(RESULT_TAG + json.dumps({"results": results}), flush=True)


def _interactive(llm: Any, params: Any) -> None:
    """Steps from stdin (see :class:`Session`), one JSON answer line each."""
    from vllm.inputs import TokensPrompt

    print(READY_TAG, flush=True)
    for line in sys.stdin:
        step = json.loads(line)
        if step.get("quit"):
            break
        reset = llm.reset_prefix_cache(reset_connector=True) if step.get("reset") else None
        t0 = time.perf_counter()
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in step["prompts"]],
                            params, use_tqdm=False) if step["prompts"] else []
        seconds = time.perf_counter() - t0
        results = [{"tokens": list(o.outputs[0].token_ids),
                    "num_cached_tokens": o.num_cached_tokens} for o in outs]
        time.sleep(step.get("settle_seconds", 0.0))
        print(STEP_TAG + json.dumps({"results": results, "seconds": seconds, "reset": reset}),
              flush=True)
    llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
