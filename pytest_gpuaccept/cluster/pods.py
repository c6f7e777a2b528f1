"""The Kubernetes engine's launcher, `python -m pytest_gpuaccept.cluster.pods`: started by the tool runner on the
login node for one node's run or one all_reduce, as srun or mpirun would be. It applies one pod per node
(kubernetes.pod_manifest), watches them with `get pods -l gpuaccept-run=ID`, and once every pod has succeeded on the
node it was pinned to, with the image the contract pins, prints their logs on stdout (a node's bundle, the
all_reduce's table), the first pod's first. Every pod of its launch is deleted at its end, on any failure, and when
it is stopped (the runner's timeout or Ctrl-C send SIGTERM): that delete runs in a session of its own, which the
runner's kill of this process group does not reach. What it did, kubectl call by call, goes to stderr (evidence).

Exit codes: 0 every pod succeeded and its log is on stdout; 1 a pod failed, or did not run as asked (its log, if
any, on stderr only); 2 nothing to launch (no image, an unknown node); 130 stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

from .base import ClusterError
from .kubernetes import CONTAINER, LABEL, KubernetesKeys, allocatable_gpus, internal_ip, parse_nodes, pod_manifest

CALL_TIMEOUT_S = 60.0  # one kubectl call to the API
LOG_TIMEOUT_S = 300.0  # one pod's log (a node's bundle: a few MB)
POLL_S = 1.0
GRACE_S = 120.0  # past activeDeadlineSeconds, for the API to say so
GONE_WAIT_S = 60.0  # after the delete, for the pods to be gone before the next launch on their nodes
STOP_WAIT_S = 1.5  # a stopped launcher's wait for its delete: the runner kills its group 2 s after SIGTERM
# A container waiting for one of these will not start by itself: said at once, never waited for.
STUCK = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError",
         "RunContainerError")


class Stopped(Exception):
    """SIGTERM or SIGINT: the run's timeout, or Ctrl-C."""


class LaunchError(Exception):
    """Why the launch has nothing to pass on."""


STARTED = time.monotonic()


def say(line: str, stamp: bool = True) -> None:
    """One line of what the launcher did, on stderr, with the seconds since it started. Where no one reads it any more
    (the run that started it was killed), the launch goes on without it, and still deletes its pods."""
    try:
        print(f"[{time.monotonic() - STARTED:7.1f} s] {line}" if stamp else line, file=sys.stderr, flush=True)
    except OSError:
        pass


def _last(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


@dataclass
class Launch:
    """One launch: its pods, all labelled gpuaccept-run=<run_id>, on the given nodes."""

    kubectl: list[str]  # kubectl with --context and -n where given
    run_id: str
    keys: KubernetesKeys
    deadline_s: int

    def env(self) -> dict[str, str]:
        """The launcher's own (clean) environment, kubectl's folder first on PATH: exec credential plugins beside it
        (gke-gcloud-auth-plugin) are found."""
        folder = os.path.dirname(self.kubectl[0])
        return {**os.environ, "PATH": ":".join(p for p in (folder, os.environ.get("PATH", "")) if p)}

    def call(self, *verb: str, stdin: str | None = None, timeout: float = CALL_TIMEOUT_S,
             quiet: bool = False) -> subprocess.CompletedProcess[str]:
        argv = [*self.kubectl, *verb]
        if not quiet:
            say(f"$ {' '.join(argv)}")
        try:
            done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, env=self.env(),
                                  check=False)
        except subprocess.TimeoutExpired:
            raise LaunchError(f"`{' '.join(argv)}` gave no answer in {timeout:g} s") from None
        except OSError as exc:
            raise LaunchError(f"`{' '.join(argv)}` could not start: {exc.strerror or exc}") from None
        if not quiet or done.returncode != 0:
            say(f"  exit {done.returncode}" + (f": {_last(done.stderr)}" if done.stderr.strip() else ""))
        return done

    def checked(self, *verb: str, stdin: str | None = None, timeout: float = CALL_TIMEOUT_S) -> str:
        done = self.call(*verb, stdin=stdin, timeout=timeout)
        if done.returncode != 0:
            raise LaunchError(f"`kubectl {' '.join(verb)}` exited with code {done.returncode}: {_last(done.stderr)}")
        return done.stdout

    def manifests(self, nodes: list[str], command: list[str], env: dict[str, str],
                  rendezvous: bool) -> tuple[list[dict[str, Any]], dict[str, str | None]]:
        """One pod per node, each with every GPU its node has; for a rendezvous, each pod's rank and the first pod's
        node address. And each node's InternalIP, which its pod's hostIP must be."""
        known = parse_nodes(self.checked("get", "nodes", "-o", "json"))
        missing = [n for n in nodes if n not in known]
        if missing:
            raise LaunchError(f"`kubectl get nodes` lists no node {', '.join(missing)}")
        addresses = {n: internal_ip(known[n]) for n in nodes}
        master = addresses[nodes[0]]
        if rendezvous and master is None:
            raise LaunchError(f"node {nodes[0]} has no InternalIP for the pods to meet at")
        pods = []
        for rank, node in enumerate(nodes):
            ranked = [*command, "--nnodes", str(len(nodes)), "--node-rank", str(rank), "--master-addr", str(master),
                      "--master-port", str(self.keys.port)] if rendezvous else command
            pods.append(pod_manifest(self.keys, self.run_id, rank, node, allocatable_gpus(known[node]), ranked, env,
                                     self.deadline_s))
        return pods, addresses

    def run(self, nodes: list[str], command: list[str], env: dict[str, str], rendezvous: bool) -> str:
        """Apply, wait, check, and return the pods' logs (the first pod's first)."""
        pods, addresses = self.manifests(nodes, command, env, rendezvous)
        for pod in pods:
            say("gpuaccept-manifest " + json.dumps(pod, sort_keys=True))
        self.checked("apply", "-f", "-", "-o", "json", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
        names = [pod["metadata"]["name"] for pod in pods]
        try:
            finished = self.wait(names)
        except LaunchError:
            self.diagnose(names)
            raise
        problems = [why for name, node in zip(names, nodes) if (why := self.check(finished[name], node, addresses[node]))]
        if problems:
            self.diagnose(names)
            raise LaunchError("; ".join(problems))
        return "".join(self.checked("logs", name, "-c", CONTAINER, timeout=LOG_TIMEOUT_S) for name in names)

    def wait(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """Until every pod has succeeded; LaunchError as soon as one failed, is stuck, or is gone."""
        deadline = time.monotonic() + self.deadline_s + GRACE_S
        seen: dict[str, str] = {}
        failures = 0
        while True:
            done = self.call("get", "pods", "-l", f"{LABEL}={self.run_id}", "-o", "json", quiet=True)
            failures = failures + 1 if done.returncode != 0 else 0
            if failures >= 5:
                raise LaunchError(f"`kubectl get pods` failed 5 times in a row: {_last(done.stderr)}")
            if done.returncode == 0:
                pods = _pods(done.stdout)
                for name in names:
                    pod = pods.get(name)
                    if pod is None:
                        raise LaunchError(f"pod {name} is gone (deleted by someone else?)")
                    where = _where(pod)
                    if seen.get(name) != where:
                        say(f"pod {name}: {where}")
                        seen[name] = where
                    _raise_if_failed(name, pod)
                if all(pods[n].get("status", {}).get("phase") == "Succeeded" for n in names):
                    return pods
            if time.monotonic() > deadline:
                raise LaunchError(f"the pods did not finish in {self.deadline_s + GRACE_S:g} s")
            time.sleep(POLL_S)

    def check(self, pod: dict[str, Any], node: str, address: str | None) -> str | None:
        """Why a pod that succeeded did not run as asked: another node, another host address, another image digest
        than the contract pins. Says what it ran either way (gpuaccept-pod, the engine reads it)."""
        name, spec, status = pod["metadata"]["name"], pod.get("spec") or {}, pod.get("status") or {}
        container: dict[str, Any] = next((c for c in status.get("containerStatuses") or [] if c.get("name") == CONTAINER),
                                         {})
        image_id = str(container.get("imageID") or "")
        say(f"gpuaccept-pod pod={name} pod_node={spec.get('nodeName')} host_ip={status.get('hostIP')} "
            f"image={container.get('image') or self.keys.image} image_id={image_id or '(none)'}")
        if spec.get("nodeName") != node:
            return f"pod {name} ran on {spec.get('nodeName')}, not on {node}"
        if address and status.get("hostIP") and status["hostIP"] != address:
            return f"pod {name} ran on host {status['hostIP']}, not on {node}'s InternalIP {address}"
        pinned = (self.keys.image or "").partition("@")[2]
        if pinned and not image_id.endswith(pinned):
            return f"pod {name} ran image {image_id or '(no imageID)'}, not the digest {pinned} the contract pins"
        return None

    def diagnose(self, names: list[str]) -> None:
        """The pods' logs, as far as there are any, on stderr only (evidence, never passed on as output)."""
        for name in names:
            done = self.call("logs", name, "-c", CONTAINER, timeout=LOG_TIMEOUT_S, quiet=True)
            if done.returncode == 0 and done.stdout:
                say(f"--- log of pod {name} (not passed on) ---\n{done.stdout[-20000:]}")

    def delete(self, stopped: bool) -> None:
        """Every pod and job of this launch. Stopped: in a session of its own, waited for only briefly (the runner
        kills this process group soon); else waited for, then the pods watched until they are gone."""
        argv = [*self.kubectl, "delete", "pods,jobs", "-l", f"{LABEL}={self.run_id}", "--wait=false"]
        say(f"$ {' '.join(argv)}")
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env=self.env(), start_new_session=True)
        except OSError as exc:
            say(f"  could not start: {exc}")
            return
        try:
            code = proc.wait(timeout=STOP_WAIT_S if stopped else CALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            say("  still deleting (left to finish on its own)")
            return
        say(f"  exit {code}")
        deadline = time.monotonic() + GONE_WAIT_S
        while not stopped and time.monotonic() < deadline:
            done = self.call("get", "pods", "-l", f"{LABEL}={self.run_id}", "-o", "json", quiet=True)
            if done.returncode == 0 and not _pods(done.stdout):
                return
            time.sleep(POLL_S)


def _pods(output: str) -> dict[str, dict[str, Any]]:
    try:
        items = json.loads(output).get("items") or []
    except (ValueError, AttributeError):
        raise LaunchError("`kubectl get pods -o json` printed no list of pods") from None
    return {p["metadata"]["name"]: p for p in items if isinstance(p, dict) and "metadata" in p}


def _where(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    waiting = [(c.get("state") or {}).get("waiting", {}).get("reason") for c in status.get("containerStatuses") or []]
    said = "; ".join(str(x) for x in (status.get("reason"), status.get("message"), *waiting) if x)
    return f"{status.get('phase', 'Pending')}" + (f" ({said})" if said else "")


def _raise_if_failed(name: str, pod: dict[str, Any]) -> None:
    status = pod.get("status") or {}
    phase = status.get("phase")
    waiting = [(c.get("state") or {}).get("waiting", {}).get("reason") for c in status.get("containerStatuses") or []]
    if phase in ("Failed", "Unknown") or any(w in STUCK for w in waiting):
        states = [c.get("state") or {} for c in status.get("containerStatuses") or []]
        said = [f"exit code {s['terminated']['exitCode']}" for s in states if "exitCode" in (s.get("terminated") or {})]
        said += [str(s["waiting"]["message"]) for s in states if (s.get("waiting") or {}).get("message")]
        raise LaunchError(f"pod {name} on {(pod.get('spec') or {}).get('nodeName')}: {_where(pod)}"
                          + (f": {'; '.join(said)}" if said else ""))


def _stop(signum: int, _frame: FrameType | None) -> None:
    raise Stopped(signal.Signals(signum).name)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pytest_gpuaccept.cluster.pods", description=__doc__)
    parser.add_argument("--kubectl", required=True)
    parser.add_argument("--context")
    parser.add_argument("--namespace")
    parser.add_argument("--image")
    parser.add_argument("--privileged", action="store_true")
    parser.add_argument("--rdma-resource", help="an extended resource each pod asks one of (the RDMA devices)")
    parser.add_argument("--run", required=True, help="the launch's gpuaccept-run label")
    parser.add_argument("--deadline-s", type=int, required=True, help="activeDeadlineSeconds of each pod")
    parser.add_argument("--port", type=int, required=True, help="the rendezvous port on the first pod's node")
    parser.add_argument("--node", action="append", required=True, help="a node to run a pod on (the first: rank 0)")
    parser.add_argument("--rendezvous", action="store_true", help="give each pod its rank and the first pod's address")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE set in every pod")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.image or not command:
        missing = "cluster.kubernetes.image is not set (the image the pods run, with pytest-gpuaccept and the tools)" \
            if command else "no command"
        say(f"gpuaccept pods: nothing to launch: {missing}", stamp=False)
        return 2
    keys = KubernetesKeys(args.context, args.namespace, args.image, args.privileged, args.port, args.rdma_resource)
    kubectl = [args.kubectl, *(["--context", args.context] if args.context else []),
               *(["-n", args.namespace] if args.namespace else [])]
    launch = Launch(kubectl, args.run, keys, args.deadline_s)
    env = dict(item.split("=", 1) for item in args.env if "=" in item)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop)
    output, problem, code = "", None, 0
    try:
        output = launch.run(args.node, command, env, args.rendezvous)
    except Stopped as exc:
        problem, code = f"stopped ({exc}): the launch's pods are being deleted", 130
    except (LaunchError, ClusterError) as exc:
        problem, code = str(exc), 1
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)  # the delete is not to be cut short
        launch.delete(stopped=code == 130)
    if problem is not None:
        say(f"gpuaccept pods: {problem}", stamp=False)  # the last line: what the node's check quotes
        return code
    try:
        sys.stdout.write(output)
        sys.stdout.flush()
    except OSError:
        return 1  # no one to pass the output on to
    return 0


if __name__ == "__main__":
    sys.exit(main())
