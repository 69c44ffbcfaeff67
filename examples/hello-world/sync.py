#!/usr/bin/env python3
"""Sync hook of the hello-world example: a ConfigMap per HelloWorld with its greeting.

Run: python3 sync.py [--port 8080] [--host 127.0.0.1]. The hook answers POST /sync with the desired children
and the parent's status, as any Metacontroller hook server does.
"""
import argparse
import json
from http.server import BaseHTTPRequestHandler, HTTPServer


def sync(request):
    parent = request["parent"]
    who = parent.get("spec", {}).get("who", "World")
    greeting = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": parent["metadata"]["name"]},
        "data": {"greeting": f"Hello, {who}!"},
    }
    observed = request["children"].get("ConfigMap.v1", {})
    return {"status": {"greetings": len(observed)}, "children": [greeting]}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        try:
            body = json.dumps(sync(json.loads(self.rfile.read(length)))).encode()
        except (ValueError, KeyError) as err:
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
    # 0.0.0.0 in a container, so the Service can reach it; loopback when run by hand.
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    HTTPServer((args.host, args.port), Handler).serve_forever()
