#!/usr/bin/env python3
"""Sync hook of the indexed-job example: one Pod per index, like a Job with
completionMode Indexed.

Pod `<job>-<i>` gets label example.com/completion-index=i and env JOB_COMPLETION_INDEX=i.
At most `parallelism` pods run at once, lowest missing index first. Finished pods are kept
(still listed as children) so their results stay visible and are never run twice. The job is
Complete when every index has Succeeded, and Failed as soon as one pod fails (no retries).

Run: python3 sync.py [--port 8080]
"""
import argparse
import copy
import json
from http.server import BaseHTTPRequestHandler, HTTPServer

INDEX_LABEL = "example.com/completion-index"


def pod_for(parent, index):
    name = parent["metadata"]["name"]
    template = parent["spec"].get("template", {})
    meta = copy.deepcopy(template.get("metadata", {}))
    meta["name"] = f"{name}-{index}"
    meta.setdefault("labels", {})[INDEX_LABEL] = str(index)
    spec = copy.deepcopy(template.get("spec", {}))
    spec["restartPolicy"] = "Never"
    for container in spec.get("containers", []):
        env = [e for e in container.get("env", []) if e.get("name") != "JOB_COMPLETION_INDEX"]
        env.append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
        container["env"] = env
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def condition(type_, reason, message):
    return {"type": type_, "status": "True", "reason": reason, "message": message}


def sync(request):
    parent = request["parent"]
    spec = parent["spec"]
    completions = int(spec["completions"])
    parallelism = int(spec.get("parallelism", completions))

    observed = {}
    for pod in request["children"].get("Pod.v1", {}).values():
        index = pod["metadata"].get("labels", {}).get(INDEX_LABEL, "")
        if index.isdigit():
            observed[int(index)] = pod
    phases = {i: pod.get("status", {}).get("phase", "Pending") for i, pod in observed.items()}
    succeeded = sum(1 for p in phases.values() if p == "Succeeded")
    failed = sum(1 for p in phases.values() if p == "Failed")
    active = sum(1 for p in phases.values() if p not in ("Succeeded", "Failed"))

    # Keep every pod that exists; start new ones while there is room and nothing failed.
    wanted = set(observed)
    room = parallelism - active if failed == 0 else 0
    for index in range(completions):
        if room <= 0:
            break
        if index not in wanted:
            wanted.add(index)
            room -= 1
    children = [pod_for(parent, i) for i in sorted(wanted) if i < completions]

    conditions = []
    if failed:
        conditions.append(condition("Failed", "PodFailed", f"{failed} pod(s) failed"))
    elif succeeded == completions:
        conditions.append(
            condition("Complete", "AllIndexesSucceeded", f"{completions} of {completions} succeeded")
        )
    status = {
        "active": active,
        "succeeded": succeeded,
        "failed": failed,
        "completedIndexes": ",".join(
            str(i) for i in sorted(observed) if phases[i] == "Succeeded"
        ),
        "conditions": conditions,
    }
    return {"status": status, "children": children}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/sync":
            self.send_error(404)
            return
        length = int(self.headers.get("Content-Length", 0))
        try:
            body = json.dumps(sync(json.loads(self.rfile.read(length)))).encode()
        except (ValueError, KeyError, TypeError) as err:
            self.send_error(400, str(err))
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    HTTPServer((args.host, args.port), Handler).serve_forever()
