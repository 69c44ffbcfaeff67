#!/usr/bin/env python3
"""Generates crates/embedded-apiserver/src/protobuf_fields.json: for every protobuf message of
the Kubernetes API, its fields by tag number with their JSON names and wire kinds.

Inputs are the two crates Cargo already has in its registry:
- k8s-pb (prost types generated from Kubernetes' generated.proto files): tag numbers, wire
  kinds, message types, maps, repeated fields;
- k8s-openapi (generated from Kubernetes' OpenAPI documents): the exact JSON field names
  (`"podIP" => Field::Key_pod_ip`), which prost's snake_case names cannot give back.

Usage: hack/gen-protobuf-fields.py [--check]
"""
import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates/embedded-apiserver/src/protobuf_fields.json")


def registry_dir(prefix):
    found = sorted(glob.glob(os.path.expanduser(f"~/.cargo/registry/src/*/{prefix}")))
    if not found:
        sys.exit(f"{prefix} not in the cargo registry; run `cargo fetch` first")
    return found[-1]


PB = registry_dir("k8s-pb-0.9.0")
OPENAPI = registry_dir("k8s-openapi-0.29.0")


def normalize(name):
    return name.replace("r#", "").replace("_", "").lower()


def openapi_json_names():
    """JSON names per normalized field name, per struct (and globally as a fallback)."""
    per_type, global_names = {}, {}
    versions = sorted(glob.glob(os.path.join(OPENAPI, "src/v1_*")))
    for path in glob.glob(os.path.join(versions[-1], "**/*.rs"), recursive=True):
        text = open(path, encoding="utf-8").read()
        m = re.search(r"impl<'de> crate::serde::Deserialize<'de> for (\w+) \{", text)
        if not m:
            continue
        names = {}
        for json_name, rust in re.findall(r'"([^"]+)" => Field::Key_(\w+),', text):
            names[normalize(rust)] = json_name
            global_names.setdefault(normalize(rust), set()).add(json_name)
        per_type.setdefault(m.group(1).lower(), []).append(names)
    return per_type, global_names


ATTR = re.compile(r'#\[prost\(([^\]]*?)tag = "(\d+)"\)\] pub (r#)?(\w+): (.*?),(?= #\[| ?$)')
STRUCT = re.compile(r"pub struct (\w+) \{(.*?)\n\}", re.S)


def resolve(module, rust_type):
    """`super::super::core::v1::PodTemplateSpec` seen from module api.apps.v1 → api.core.v1.PodTemplateSpec."""
    inner = rust_type.replace(" ", "")
    wrappers = ("::core::option::Option<", "::prost::alloc::vec::Vec<", "::prost::alloc::boxed::Box<")
    while any(inner.startswith(w) for w in wrappers):
        for wrapper in wrappers:
            if inner.startswith(wrapper):
                inner = inner[len(wrapper):-1]
    if "BTreeMap<" in inner:
        inner = inner.split(",", 1)[1].strip().rstrip(",")[:-1].rstrip(",")
    parts = inner.replace(" ", "").split("::")
    path = list(module)
    while parts and parts[0] == "super":
        parts.pop(0)
        path.pop()
    return ".".join(path + parts)


def main():
    per_type, global_names = openapi_json_names()
    messages, unresolved = {}, []
    for path in sorted(glob.glob(os.path.join(PB, "src/**/mod.rs"), recursive=True)):
        rel = os.path.relpath(os.path.dirname(path), os.path.join(PB, "src"))
        module = rel.split(os.sep)
        text = open(path, encoding="utf-8").read()
        for name, body in STRUCT.findall(text):
            fields = []
            # One line per struct: doc comments out, whitespace collapsed, so multi-line
            # types (maps of messages) read like the others.
            flat = " ".join(
                line.strip() for line in body.splitlines() if not line.strip().startswith("//")
            )
            flat = re.sub(r"\s+", " ", flat).replace("< ", "<").replace(", >", ">").replace(" >", ">")
            for attr, tag, _, field, rust_type in ATTR.findall(flat.strip()):
                attr = attr.strip().rstrip(",")
                kind = attr.split(",")[0].split("=")[0].strip()
                repeated = "repeated" in attr
                entry = {"tag": int(tag)}
                if kind in ("btree_map", "hash_map", "map"):
                    key, value = re.search(r'map = "(\w+), (\w+)"', attr).groups()
                    entry["map"] = value if value != "message" else resolve(module, rust_type)
                elif kind == "message":
                    entry["message"] = resolve(module, rust_type)
                else:
                    entry["kind"] = kind
                if repeated:
                    entry["repeated"] = True
                candidates = [t.get(normalize(field)) for t in per_type.get(name.lower(), [])]
                candidates = [c for c in candidates if c]
                json_name = candidates[0] if candidates else None
                if json_name is None:
                    options = global_names.get(normalize(field), set())
                    json_name = sorted(options)[0] if len(options) == 1 else None
                if (json_name is None and "message" in entry
                        and normalize(entry["message"].rsplit(".", 1)[1]) == normalize(field)):
                    # A Go embedded struct: its own field in protobuf, inlined in JSON.
                    entry["inline"] = True
                    json_name = ""
                if json_name is None:
                    # Not in any OpenAPI document (internal messages): camelCase of the proto name.
                    head, *rest = field.split("_")
                    json_name = head + "".join(p[:1].upper() + p[1:] for p in rest)
                    unresolved.append(f"{'.'.join(module)}.{name}.{field}")
                entry["json"] = json_name
                fields.append(entry)
            messages[".".join(module + [name])] = fields
    out = json.dumps(messages, sort_keys=True, separators=(",", ":")) + "\n"
    if "--check" in sys.argv:
        if open(OUT, encoding="utf-8").read() != out:
            sys.exit(f"{OUT} is out of date: run hack/gen-protobuf-fields.py")
        return
    open(OUT, "w", encoding="utf-8").write(out)
    print(f"{len(messages)} messages, {sum(len(f) for f in messages.values())} fields; "
          f"{len(unresolved)} names not in OpenAPI (camelCased)", file=sys.stderr)
    if "--verbose" in sys.argv:
        print("\n".join(unresolved), file=sys.stderr)


main()
