#!/usr/bin/env python3
"""Sync hook of the webhook-auth example, served over HTTPS (Python's ssl, no dependencies).

Every call must carry "Authorization: Bearer <token>" with the token in --token-file;
others get 401 (Metacontroller then records a SyncError Event on the parent and keeps its
children). The answer is a ConfigMap with a greeting, as in hello-world.

Run: python3 sync.py --cert certs/hook.crt --key certs/hook.key --token-file token [--port 8443]
"""
import argparse
import hmac
import json
import ssl
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
    return {"status": {"authenticated": True}, "children": [greeting]}


def handler(token_file):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            # Read per call, so a rotated token file applies without a restart.
            with open(token_file) as f:
                expected = f"Bearer {f.read().strip()}"
            given = self.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), expected.encode()):
                self.send_error(401, "missing or wrong bearer token")
                return
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

    return Handler


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument(
        "--client-ca",
        help="require a client certificate signed by this CA (mutual TLS)",
    )
    args = parser.parse_args()
    server = HTTPServer((args.host, args.port), handler(args.token_file))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    if args.client_ca:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(args.client_ca)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()
