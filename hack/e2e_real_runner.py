#!/usr/bin/env python3
"""Runs the end-to-end test binaries against a real cluster (driven by hack/e2e-real.sh).

Test binaries come from `cargo test --no-run --message-format=json` output. Two groups:
- parallel: tests that start controllers with `--target-label-selector` (or in-process ones
  bound to their own parent CRD), so several can share one cluster;
- solo: tests that need the cluster to themselves: those that start `metacontroller run`
  without a selector (examples, dev mode), which would also sync other tests' controllers,
  and those that count every object of a kind in the cluster (sharding's cache split). Each
  runs alone, after leftover controller objects are deleted.
Each binary runs from its package directory, as cargo runs it, with
METACONTROLLER_E2E_KUBECONFIG set. Prints one line per binary and a closing summary.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

PACKAGES = {"metacontroller", "metacontroller-controllers", "metacontroller-testkit"}
SOLO = re.compile(r"^(example_|dev|sharding|children_elsewhere_sharded|hook_rollout_sharded)")
RESULT = re.compile(r"^test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored")
# Per binary: generous, so only a hung test trips it.
TIMEOUT_S = 900


def test_binaries(artifacts, only):
    found = []
    with open(artifacts) as f:
        for line in f:
            msg = json.loads(line)
            if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
                continue
            target = msg["target"]
            name = package_name(msg)
            if name not in PACKAGES or "test" not in target["kind"]:
                continue
            if only and not re.search(only, target["name"]):
                continue
            found.append({
                "name": target["name"],
                "package": name,
                "exe": msg["executable"],
                "cwd": os.path.dirname(msg["manifest_path"]),
            })
    return sorted(found, key=lambda b: (b["package"], b["name"]))


def package_name(msg):
    """The package of a cargo message: package_id is `<source>#<name>@<version>`, or
    `<source>/<name>#<version>` when the name is the directory's."""
    source, _, tail = msg["package_id"].rpartition("#")
    if "@" in tail:
        return tail.split("@", 1)[0]
    return source.rstrip("/").rsplit("/", 1)[-1]


def delete_controllers(kubeconfig):
    """Leftover controller objects of earlier tests: a controller started without a selector
    would sync them too."""
    for kind in ("compositecontrollers", "decoratorcontrollers"):
        subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, "delete", kind, "--all",
             "--wait=false", "--ignore-not-found"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, check=False)


def failure_excerpt(lines):
    """The first lines of every panic message (a test's own assertion text comes first there),
    then the log's tail: a long panic message would otherwise push its head out of view."""
    out = []
    shown_until = -1
    for i, line in enumerate(lines):
        starts = "panicked at" in line or (line.startswith("---- ") and "stdout ----" in line)
        if not starts or i <= shown_until:
            continue
        out.append("---- " + line)
        for j in range(i + 1, min(i + 25, len(lines))):
            if lines[j].startswith("stack backtrace:"):
                break
            out.append(lines[j])
            shown_until = j
    out.append("---- tail")
    out.extend(lines[-30:])
    return out[:400]


def run_binary(b, kubeconfig, logs, lock):
    env = dict(os.environ, METACONTROLLER_E2E_KUBECONFIG=kubeconfig, CI=os.environ.get("CI", "true"))
    log_path = os.path.join(logs, f"{b['package']}--{b['name']}.log")
    start = time.monotonic()
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run([b["exe"]], cwd=b["cwd"], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=TIMEOUT_S, check=False)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    seconds = time.monotonic() - start
    passed = failed = ignored = 0
    with open(log_path, errors="replace") as log:
        text = log.read()
    for line in text.splitlines():
        m = RESULT.match(line)
        if m:
            passed, failed, ignored = int(m.group(2)), int(m.group(3)), int(m.group(4))
    ok = code == 0
    if not ok and failed == 0:
        failed = 1
    with lock:
        print(f"{'ok  ' if ok else 'FAIL'} {b['package']}/{b['name']}: {passed} passed, "
              f"{failed} failed, {ignored} ignored ({seconds:.1f} s)", flush=True)
        if not ok:
            for line in failure_excerpt(text.splitlines()):
                print("    " + line[:400])
            print(f"---- (whole log: {log_path}, exit {code})", flush=True)
    return {"binary": b, "ok": ok, "passed": passed, "failed": failed, "ignored": ignored,
            "seconds": seconds}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--artifacts", required=True)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--logs", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only")
    args = ap.parse_args()

    binaries = test_binaries(args.artifacts, args.only)
    if not binaries:
        print("e2e-real: no test binaries selected", file=sys.stderr)
        return 2
    parallel = [b for b in binaries if not SOLO.match(b["name"])]
    solo = [b for b in binaries if SOLO.match(b["name"])]
    lock = threading.Lock()
    results = []
    wall = time.monotonic()
    print(f"== e2e-real: {len(parallel)} test binaries, {args.jobs} at a time", flush=True)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results += list(pool.map(lambda b: run_binary(b, args.kubeconfig, args.logs, lock),
                                 parallel))
    print(f"== e2e-real: {len(solo)} test binaries that need the cluster to themselves, "
          "one at a time", flush=True)
    for b in solo:
        delete_controllers(args.kubeconfig)
        results.append(run_binary(b, args.kubeconfig, args.logs, lock))
    wall = time.monotonic() - wall

    passed = sum(r["passed"] for r in results)
    failed = sum(r["failed"] for r in results)
    ignored = sum(r["ignored"] for r in results)
    bad = [r for r in results if not r["ok"]]
    print(f"== e2e-real: {len(results)} test binaries in {wall:.0f} s; "
          f"{len(bad)} failed: {', '.join(r['binary']['name'] for r in bad) or 'none'}")
    print(f"e2e-real: {passed} passed, {failed} failed, {ignored} skipped")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
