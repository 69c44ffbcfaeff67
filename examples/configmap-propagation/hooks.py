#!/usr/bin/env python3
"""Hooks of the configmap-propagation example (plain Python, no dependencies).

POST /customize: the related objects a ConfigMapPropagation needs: the namespaces its
    namespaceSelector matches and its source ConfigMap.
POST /sync: one copy of the source ConfigMap per selected namespace (v2 maps: the keys of
    `related` and `children` are `<namespace>/<name>`, or `<name>` for a Namespace).

Run: python3 hooks.py [--port 8080]
"""
import argparse
import json
from http.server import BaseHTTPRequestHandler, HTTPServer

# Labels and annotations of the source that are not copied (they belong to the source).
SKIPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def customize(request):
    spec = request["parent"].get("spec", {})
    source = spec.get("source", {})
    return {
        "relatedResources": [
            {
                "apiVersion": "v1",
                "resource": "namespaces",
                "labelSelector": spec.get("namespaceSelector", {}),
            },
            {
                "apiVersion": "v1",
                "resource": "configmaps",
                "namespace": source.get("namespace", ""),
                "names": [source.get("name", "")],
            },
        ]
    }


def sync(request):
    parent = request["parent"]
    source_ref = parent["spec"]["source"]
    related = request.get("related", {})
    sources = related.get("ConfigMap.v1", {})
    source = sources.get(f"{source_ref['namespace']}/{source_ref['name']}")
    if source is None:
        return {
            "status": {"sourceFound": False, "copies": 0, "namespaces": []},
            "children": [],
        }

    targets = sorted(
        ns["metadata"]["name"]
        for ns in related.get("Namespace.v1", {}).values()
        # Nothing can be created in a namespace being deleted.
        if ns.get("status", {}).get("phase") != "Terminating"
        and ns["metadata"]["name"] != source_ref["namespace"]
    )
    annotations = {
        k: v
        for k, v in source["metadata"].get("annotations", {}).items()
        if k not in SKIPPED_ANNOTATIONS
    }
    annotations["example.com/copied-from"] = f"{source_ref['namespace']}/{source_ref['name']}"
    children = []
    for namespace in targets:
        copy = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": source_ref["name"],
                "namespace": namespace,
                "annotations": annotations,
            },
            "data": source.get("data", {}),
        }
        if source.get("binaryData"):
            copy["binaryData"] = source["binaryData"]
        children.append(copy)

    # Status: the copies that exist and already hold the source's data.
    observed = request.get("children", {}).get("ConfigMap.v1", {}).values()
    current = sorted(
        cm["metadata"]["namespace"]
        for cm in observed
        if cm.get("data", {}) == source.get("data", {})
        and cm["metadata"]["namespace"] in targets
    )
    return {
        "status": {"sourceFound": True, "copies": len(current), "namespaces": current},
        "children": children,
    }


ROUTES = {"/customize": customize, "/sync": sync}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        route = ROUTES.get(self.path)
        if route is None:
            self.send_error(404)
            return
        length = int(self.headers.get("Content-Length", 0))
        try:
            body = json.dumps(route(json.loads(self.rfile.read(length)))).encode()
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
