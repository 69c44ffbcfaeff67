#!/usr/bin/env python3
"""A webhook-auth hook shaped like upstream's example (examples/webhook-auth/manifest/sync.py
in Metacontroller v4.17.2), written for this test: http.server's BaseHTTPRequestHandler with
its defaults and an ssl-wrapped listening socket requiring client certificates and a Bearer
token. The answers are HTTP/1.0 without Content-Length, and the connection closes without a
TLS close_notify, so the body ends where the connection ends.

Run: close_delimited_tls_hook.py CERT_DIR TOKEN_FILE PORT
(CERT_DIR holds tls.crt, tls.key and ca.crt, the CA of accepted client certificates.)
"""

import json
import logging
import ssl
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import List

logging.basicConfig(level=logging.DEBUG)
LOGGER = logging.getLogger(__name__)

CERT_DIR = Path(sys.argv[1])
TOKEN_FILE = Path(sys.argv[2])
PORT = int(sys.argv[3])


def expected_token() -> str:
    return TOKEN_FILE.read_text().strip()


class Controller(BaseHTTPRequestHandler):
    def authorized(self) -> bool:
        return self.headers.get("Authorization", "") == "Bearer " + expected_token()

    def sync(self, parent: dict, related: dict) -> List[dict]:
        source_namespace = parent["spec"]["sourceNamespace"]
        source_name = parent["spec"]["sourceName"]
        if not related["Secret.v1"]:
            LOGGER.info("the source Secret is gone: no copies")
            return []
        source = related["Secret.v1"][f"{source_namespace}/{source_name}"]
        copies = []
        for namespace in related["Namespace.v1"].values():
            name = namespace["metadata"]["name"]
            if name != source_namespace:
                copies.append(self.copy(source_name, name, source["data"]))
        return copies

    def copy(self, name: str, namespace: str, data: dict) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "data": data,
        }

    def related(self, spec: dict) -> List[dict]:
        return [
            {
                "apiVersion": "v1",
                "resource": "secrets",
                "namespace": spec["sourceNamespace"],
                "names": [spec["sourceName"]],
            },
            {
                "apiVersion": "v1",
                "resource": "namespaces",
                "labelSelector": spec["targetNamespaceLabelSelector"],
            },
        ]

    def answer(self, response: dict):
        # As upstream: no Content-Length, so the body is delimited by the connection's end.
        self.send_response(200)
        self.send_header("Content-type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(response).encode("utf-8"))

    def do_POST(self):
        if not self.authorized():
            LOGGER.warning("unauthorized request to %s", self.path)
            self.send_response(401)
            self.end_headers()
            return
        request = json.loads(self.rfile.read(int(self.headers.get("content-length"))))
        parent = request["parent"]
        if self.path == "/sync":
            LOGGER.info("/sync %s", parent["metadata"]["name"])
            self.answer(
                {
                    "status": {"working": "fine"},
                    "children": self.sync(parent, request["related"]),
                }
            )
        elif self.path == "/customize":
            LOGGER.info("/customize %s", parent["metadata"]["name"])
            self.answer({"relatedResources": self.related(parent["spec"])})
        else:
            self.send_response(404)
            self.end_headers()


def main():
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(CERT_DIR / "tls.crt", CERT_DIR / "tls.key")
    context.load_verify_locations(CERT_DIR / "ca.crt")
    context.verify_mode = ssl.CERT_REQUIRED
    server = HTTPServer(("127.0.0.1", PORT), Controller)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    LOGGER.info("listening on 127.0.0.1:%d (HTTPS, mutual TLS)", PORT)
    server.serve_forever()


if __name__ == "__main__":
    main()
