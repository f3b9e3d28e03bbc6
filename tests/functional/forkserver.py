"""The functional tests' rank launcher: one process per pytest session imports torch, Megatron-Core,
transformers and bridge once, then forks the ranks of every launch from itself.

Why: a rank started by torchrun pays 5-7 s of CPU importing those libraries (and ~1 s tearing them down)
before any test work, and on the 2-core CI machine, running both Python legs at once, that was most of
the functional tiers' time. A forked rank starts with the modules already imported.

What a rank sees is torchrun's contract: the environment variables torchrun sets (RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GROUP_RANK, ROLE_*, TORCHELASTIC_RUN_ID, each
rank's TORCHELASTIC_ERROR_FILE in a folder of the launch's own, ...),
`sys.argv` and `sys.path[0]` of `python SCRIPT ARGS...`, the script run as `__main__`, stdout and stderr
shared by every rank, exit status 1 for the launch when a rank fails (the others get SIGTERM, then SIGKILL
after a grace period, as torchrun does). What only a real torchrun shows (its failure summary, its
handling of signals sent to the launcher, warnings printed while the libraries are imported) is tested
through real torchrun launches (test_error_line, test_stop_signals, test_checkpoint_faults,
test_readme_commands). `BRIDGE_TEST_LAUNCHER=torchrun` runs every launch through torchrun.

CUDA: a process forked from one that asked the CUDA runtime anything (even `torch.cuda.is_available()`,
which Megatron-Core and torch.utils.cpp_extension call at import time) is marked "bad fork" by torch and
fails with "Cannot re-initialize CUDA in forked subprocess" as soon as it touches CUDA. The server asks
with NVML instead (PYTORCH_NVML_BASED_CUDA_CHECK=1, torch's switch for this case), then checks the result
for real: after the preload it forks a probe that reports torch's bad-fork flag, and says in its first
line whether ranks forked from it can use CUDA (`fork_is_safe`). When they cannot (a driver without NVML,
a preloaded module that initialised CUDA), the client runs every launch through torchrun instead, and the
server refuses any launch request with the reason.

Protocol (this process's stdin and stdout, one JSON object per line): first {"cuda": cuda_fork_state()},
once the preload is done; then a request
{"script", "args", "nproc", "env", "cwd", "output", "master_port"} is answered by {"pid": leader} at once
and {"returncode": code} when the launch ends. The leader is a forked child in a process group of its
own (so a timeout kills it and its ranks with one killpg; in the same session, so that the kernel's
per-session CPU shares, where it has them, count the launch with the pytest run that made it)."""

from __future__ import annotations

import atexit
import importlib
import json
import os
import random
import runpy
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from typing import NoReturn

# how long the other ranks get after SIGTERM before SIGKILL, when one rank failed (torchrun: 30 s)
GRACE_SECONDS = 30.0


# In this order: bridge first, which installs its warning filters before Megatron-Core is imported (as a
# worker's own imports do); `bridge.training`'s functions through the package, so that its lazy attributes
# are the functions, not the submodules.
PRELOAD = [
    "bridge.training:pretrain",
    "bridge.training:finetune",
    "bridge.conversion",
    "recipes.llama",
    "megatron.core.models.gpt",
    "megatron.core.optimizer",
    "megatron.core.dist_checkpointing",
    "torch.distributed.checkpoint",
    "transformers",
    "transformers.models.llama.modeling_llama",
]


def cuda_fork_state() -> dict:
    """Can ranks forked from this process use CUDA? Call after the preload, before any launch.

    cuda_devices: devices the ranks would see (NVML's count where it answers, so that asking does not
    itself mark the forks); cuda_initialized: this process initialised CUDA; cuda_poisoned_fork: a child
    forked now is in torch's bad-fork state (measured in a forked probe, not inferred)."""
    import torch

    devices = torch.cuda.device_count()  # before the probe: the probe sees what this call left behind
    initialized = torch.cuda.is_initialized()
    probe = os.fork()
    if probe == 0:
        os._exit(3 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(probe, 0)
    poisoned = os.waitstatus_to_exitcode(status) == 3
    return {"cuda_devices": devices, "cuda_initialized": initialized, "cuda_poisoned_fork": poisoned}


def fork_is_safe(state: dict) -> tuple[bool, str]:
    """Whether ranks forked from a server in `state` (cuda_fork_state) can use CUDA, and why not.

    Without CUDA devices forking is always safe: the ranks run on gloo and never touch CUDA, bad fork or
    not (a CUDA build of torch on a machine without a driver marks the forks too)."""
    if state["cuda_devices"] == 0:
        return True, ""
    if state["cuda_initialized"]:
        return False, "the fork server initialised CUDA while importing the preloaded modules"
    if state["cuda_poisoned_fork"]:
        return False, (
            "a process forked from the fork server is in torch's bad-fork state (the CUDA runtime was "
            "queried during the preload, and NVML could not answer instead)"
        )
    return True, ""


def preload() -> None:
    """Import what the workers import (nothing starts a thread: fork copies only the calling thread).
    Megatron-Core first as every bridge entry point imports it (bridge.parallel.megatron_import: deferred
    torch.compile, the root logger left as found)."""
    from bridge.parallel.megatron_import import import_megatron

    import_megatron()
    for name in PRELOAD:
        module, _, attribute = name.partition(":")
        loaded = importlib.import_module(module)
        if attribute:
            getattr(loaded, attribute)
    assert threading.active_count() == 1, f"a preloaded module started threads: {threading.enumerate()}"


def _error_file(agent_dir: str, rank: int) -> str:
    """torchrun's per-rank error file, <agent dir>/attempt_0/<local rank>/error.json (its folder made): a
    failing rank writes its error there, and bridge's one-line user errors are printed by the first rank
    of the launch to fail (bridge.cli.user_error), whichever it is."""
    folder = os.path.join(agent_dir, "attempt_0", str(rank))
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, "error.json")


def _rank_environment(request: dict, rank: int, run_id: str, agent_dir: str) -> dict[str, str]:
    nproc = str(request["nproc"])
    return {
        **request["env"],
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "WORLD_SIZE": nproc,
        "LOCAL_WORLD_SIZE": nproc,
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": nproc,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(request["master_port"]),
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "True",  # the leader holds the store, as torchrun's agent does
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "TORCHELASTIC_ERROR_FILE": _error_file(agent_dir, rank),
    }


def _exit_code(error: SystemExit) -> int:
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)  # as the interpreter does with sys.exit("message")
    return 1


def _run_rank(request: dict, rank: int, output_fd: int, run_id: str, agent_dir: str) -> NoReturn:
    """Become rank `rank`: run the script as `python SCRIPT ARGS...` would, then exit with its status."""
    code = 1
    try:
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 (fd 0, which the process keeps)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(_rank_environment(request, rank, run_id, agent_dir))
        random.seed()  # a fresh process's generators differ per process; forked ones would be equal
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        script = request["script"]
        sys.argv = [script, *request["args"]]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as error:
            code = _exit_code(error)
        except BaseException:
            traceback.print_exc()
            code = 1
        threading._shutdown()  # the interpreter's exit: join non-daemon threads, then the atexit hooks
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 (a closed stream: nothing left to write)
                pass
        os._exit(code)


def _stop(pids: dict[int, int]) -> None:
    """SIGTERM the ranks still running, SIGKILL those left after the grace period."""
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while pids and time.monotonic() < deadline:
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid:
            pids.pop(pid, None)
        else:
            time.sleep(0.05)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def _lead(request: dict) -> NoReturn:
    """The launch: fork the ranks, wait for them, exit 0 when all succeeded and 1 otherwise."""
    code = 1
    agent_dir = None
    try:
        os.setpgid(0, 0)
        output_fd = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        run_id = f"forkserver-{os.getpid()}"
        agent_dir = tempfile.mkdtemp(prefix=f"{run_id}-")  # torchrun's per-launch folder of error files
        pids: dict[int, int] = {}
        for rank in range(request["nproc"]):
            pid = os.fork()
            if pid == 0:
                _run_rank(request, rank, output_fd, run_id, agent_dir)
            pids[pid] = rank
        # torchrun's agent holds the TCPStore for the whole launch, so a rank that destroys its process
        # group and makes another one (the workers do, between cases) meets the others on the same store.
        # Made after the forks (a store's thread must not be forked); the ranks' clients retry until it is up.
        import torch.distributed

        try:
            store = torch.distributed.TCPStore(  # noqa: F841 (kept open until the ranks end)
                "127.0.0.1", request["master_port"], is_master=True, wait_for_workers=False, multi_tenant=True
            )
        except Exception as error:  # noqa: BLE001 (said in the launch's output, which the test shows)
            os.write(output_fd, f"forkserver: no store on port {request['master_port']}: {error}\n".encode())
            _stop(pids)
            raise
        code = 0
        while pids:
            pid, status = os.wait()
            rank = pids.pop(pid)
            rank_code = os.waitstatus_to_exitcode(status)
            if rank_code != 0:
                message = (
                    f"forkserver: rank {rank} (pid {pid}) exited with {rank_code}; stopping the others\n"
                )
                os.write(output_fd, message.encode())
                _stop(pids)
                code = 1
                break
    finally:
        if agent_dir is not None:
            shutil.rmtree(agent_dir, ignore_errors=True)
        os._exit(code)


def _reply(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # for the preload only: the ranks get the request's
    preload()
    state = cuda_fork_state()
    safe, reason = fork_is_safe(state)
    _reply({"cuda": state})
    for line in sys.stdin:
        request = json.loads(line)
        if not safe:
            _reply({"refused": f"forkserver: ranks forked from this process cannot use CUDA: {reason}"})
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        leader = os.fork()
        if leader == 0:
            _lead(request)
        _reply({"pid": leader})
        _, status = os.waitpid(leader, 0)
        _reply({"returncode": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    main()
