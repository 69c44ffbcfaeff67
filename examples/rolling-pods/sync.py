#!/usr/bin/env python3
"""Sync hook of the rolling-pods example: numbered Pods like a StatefulSet's.

The hook only says which pods a RollingPodSet wants (`<name>-<i>`, from spec.template) and
reports readiness; Metacontroller decides which revision each pod is built from and replaces
them one at a time (updateStrategy RollingRecreate in controller.yaml).

Run: python3 sync.py [--port 8080]
"""
import argparse
import copy
import json
from http.server import BaseHTTPRequestHandler, HTTPServer

INDEX_LABEL = "example.com/pod-index"


def is_ready(pod):
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def sync(request):
    parent = request["parent"]
    name = parent["metadata"]["name"]
    spec = parent.get("spec", {})
    template = spec.get("template", {})
    replicas = int(spec.get("replicas", 1))

    pods = []
    for i in range(replicas):
        meta = copy.deepcopy(template.get("metadata", {}))
        meta["name"] = f"{name}-{i}"
        meta.setdefault("labels", {})[INDEX_LABEL] = str(i)
        pod_spec = copy.deepcopy(template.get("spec", {}))
        # Stable DNS names as a StatefulSet's pods have (with a headless Service).
        pod_spec.setdefault("hostname", meta["name"])
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec})

    observed = request["children"].get("Pod.v1", {}).values()
    live = [p for p in observed if not p["metadata"].get("deletionTimestamp")]
    return {
        "status": {
            "replicas": len(live),
            "readyReplicas": sum(1 for p in live if is_ready(p)),
        },
        "children": pods,
    }


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
