#!/usr/bin/env python3
"""The Helm chart through the real Helm engine (helm-python-sdk binds Helm v4's Go SDK).

    hack/helm_chart.py lint                      helm lint --strict, defaults and ci/*.yaml
    hack/helm_chart.py gen-deploy                write deploy/ from the default render
    hack/helm_chart.py check-deploy              deploy/ equals the default render
    hack/helm_chart.py render [--values F] [--set-json J] [--release R] [--namespace N]
                                                 print the rendered objects as JSON
    hack/helm_chart.py install|upgrade --kubeconfig K --release R --namespace N
                                       [--values F] [--set-json J]
    hack/helm_chart.py uninstall --kubeconfig K --release R --namespace N

Errors go to stderr with exit status 1; the Rust tests in
crates/metacontroller/tests/helm_chart.rs run these and assert on the results.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

try:
    import helm_python as helm
except ImportError:  # the Rust tests check for the package before calling us
    sys.exit("helm-python-sdk is not installed: pip install helm-python-sdk==0.2.2")

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "metacontroller"
DEPLOY = ROOT / "deploy"
# The default render in deploy/ is the release "metacontroller" in namespace "metacontroller".
DEFAULT_RELEASE = "metacontroller"
DEFAULT_NAMESPACE = "metacontroller"
# Helm's bookkeeping labels: true for a Helm release, false for `kubectl apply -k`.
HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
# kubectl/Helm install order, so deploy/ reads top-down like the install.
KIND_ORDER = [
    "Namespace",
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Service",
    "PodDisruptionBudget",
    "StatefulSet",
    "ServiceMonitor",
]


def fail(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(1)


def documents(text: str) -> list[dict[str, Any]]:
    """Objects of a multi-document YAML stream, parsed by Helm's own YAML decoder."""
    out = []
    chunk: list[str] = []
    for line in text.splitlines() + ["---"]:
        if line.rstrip() == "---" or line.startswith("--- "):
            doc = "\n".join(chunk).strip()
            chunk = []
            if doc and any(l.strip() and not l.lstrip().startswith("#") for l in doc.splitlines()):
                parsed = helm.values_from_yaml(doc)
                if parsed:
                    out.append(parsed)
        else:
            chunk.append(line)
    return out


def key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata", {})
    return (obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))


def sort_key(obj: dict[str, Any]) -> tuple[int, tuple[str, str, str, str]]:
    kind = obj.get("kind", "")
    rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
    return (rank, key(obj))


def load_values(path: str | None, set_json: str | None) -> dict[str, Any] | None:
    values: dict[str, Any] | None = None
    if path:
        values = helm.values_from_yaml(Path(path).read_text())
    if set_json:
        extra = json.loads(set_json)
        values = merge(values or {}, extra)
    return values


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = v
    return out


def render_texts(values: dict[str, Any] | None, release: str, namespace: str) -> dict[str, str]:
    """Template path -> rendered text (NOTES.txt and empty templates left out)."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name=release, namespace=namespace, is_install=True)
    return {
        path: text
        for path, text in sorted(rendered.items())
        if not path.endswith("NOTES.txt") and documents(text)
    }


def render_objects(values: dict[str, Any] | None, release: str, namespace: str) -> list[dict[str, Any]]:
    objects = [o for text in render_texts(values, release, namespace).values() for o in documents(text)]
    return sorted(objects, key=sort_key)


def without_helm_labels(obj: dict[str, Any]) -> dict[str, Any]:
    obj = json.loads(json.dumps(obj))
    labels = obj.get("metadata", {}).get("labels")
    if isinstance(labels, dict):
        for label in HELM_ONLY_LABELS:
            labels.pop(label, None)
    return obj


# --- lint -------------------------------------------------------------------


def cmd_lint(_: argparse.Namespace) -> None:
    cases: list[tuple[str, dict[str, Any] | None]] = [("default values", None)]
    for path in sorted((CHART / "ci").glob("*.yaml")):
        cases.append((str(path.relative_to(ROOT)), helm.values_from_yaml(path.read_text())))
    problems = []
    for name, values in cases:
        report = helm.lint(CHART, values, strict=True, namespace=DEFAULT_NAMESPACE)
        # Severity: 1 info, 2 warning, 3 error; --strict fails on warnings too.
        bad = [m for m in report["messages"] if m["severity"] >= 2] + [
            {"path": "", "error": e} for e in report.get("errors", [])
        ]
        for m in bad:
            problems.append(f"{name}: {m['path']}: {m['error']}")
        print(f"lint {name}: {len(report['messages'])} message(s), {len(bad)} problem(s)")
    if problems:
        fail("helm lint --strict found problems:\n" + "\n".join(problems))


# --- deploy/ ----------------------------------------------------------------

DEPLOY_HEADER = """\
# GENERATED by `hack/helm_chart.py gen-deploy` from charts/metacontroller with default values
# (release "metacontroller", namespace "metacontroller"); do not edit. Identical to what
# `helm install metacontroller charts/metacontroller -n metacontroller` creates, minus
# Helm's bookkeeping labels (helm.sh/chart, app.kubernetes.io/managed-by).
"""

KUSTOMIZATION = """\
# kubectl apply -k deploy/
# The same objects as the Helm chart's default install; see metacontroller.yaml.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - namespace.yaml
  - crds/metacontroller-crds-v1.yaml
  - metacontroller.yaml
"""

NAMESPACE = f"""\
apiVersion: v1
kind: Namespace
metadata:
  name: {DEFAULT_NAMESPACE}
"""


def strip_helm_label_lines(text: str) -> str:
    lines = [
        line
        for line in text.splitlines()
        if not any(line.strip().startswith(label + ":") for label in HELM_ONLY_LABELS)
    ]
    return "\n".join(lines).strip("\n") + "\n"


def cmd_gen_deploy(_: argparse.Namespace) -> None:
    texts = render_texts(None, DEFAULT_RELEASE, DEFAULT_NAMESPACE)
    ordered = sorted(texts.items(), key=lambda kv: min(sort_key(o) for o in documents(kv[1])))
    parts = []
    for path, text in ordered:
        body = strip_helm_label_lines(text)
        parts.append(f"# Source: {path}\n{body}")
    (DEPLOY / "metacontroller.yaml").write_text(DEPLOY_HEADER + "---\n" + "---\n".join(parts))
    (DEPLOY / "namespace.yaml").write_text(NAMESPACE)
    (DEPLOY / "kustomization.yaml").write_text(KUSTOMIZATION)
    print(f"wrote {DEPLOY}/metacontroller.yaml, namespace.yaml, kustomization.yaml")


def deploy_objects() -> list[dict[str, Any]]:
    """The objects `kubectl apply -k deploy/` creates: the kustomization's resources, read
    as kustomize does for a kustomization that only lists files."""
    kustomization = helm.values_from_yaml((DEPLOY / "kustomization.yaml").read_text())
    extra = set(kustomization) - {"apiVersion", "kind", "resources"}
    if extra:
        fail(f"deploy/kustomization.yaml uses {sorted(extra)}; this check only models `resources`")
    objects = []
    for resource in kustomization["resources"]:
        objects.extend(documents((DEPLOY / resource).read_text()))
    return objects


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, as `/json/pointer: a != b` lines."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}/{i}")]
    return [] if a == b else [f"{path or '/'}: {json.dumps(a)} != {json.dumps(b)}"]


def cmd_check_deploy(_: argparse.Namespace) -> None:
    problems = []
    # The chart's crds/ and deploy/crds/ are the same files.
    with helm.Chart.load(CHART) as chart:
        chart_crds = {Path(c["filename"]).name: c["data"] for c in chart.crds}
    for name, data in chart_crds.items():
        deployed = DEPLOY / "crds" / name
        if not deployed.exists() or deployed.read_text() != data:
            problems.append(f"charts/metacontroller/crds/{name} differs from deploy/crds/{name}")
    if not chart_crds:
        problems.append("the chart has no CRDs under crds/")

    expected = [without_helm_labels(o) for o in render_objects(None, DEFAULT_RELEASE, DEFAULT_NAMESPACE)]
    expected.append(helm.values_from_yaml(NAMESPACE))
    for text in chart_crds.values():
        expected.extend(documents(text))
    actual = deploy_objects()

    want = {key(o): o for o in expected}
    have = {key(o): o for o in actual}
    if len(have) != len(actual):
        problems.append("deploy/ lists an object twice")
    for k in sorted(set(want) - set(have)):
        problems.append(f"missing from deploy/: {k}")
    for k in sorted(set(have) - set(want)):
        problems.append(f"in deploy/ but not rendered by the chart: {k}")
    for k in sorted(set(want) & set(have)):
        if want[k] != have[k]:
            lines = "\n".join(f"  {d}" for d in differences(want[k], have[k]))
            problems.append(f"{k} differs (chart != deploy/):\n{lines}")

    # Where kubectl is installed, its kustomize must build the same objects.
    kubectl = shutil.which("kubectl")
    if kubectl:
        built = subprocess.run([kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True)
        if built.returncode != 0:
            problems.append(f"kubectl kustomize deploy/ failed: {built.stderr.strip()}")
        else:
            kustomized = {key(o): o for o in documents(built.stdout)}
            if kustomized != have:
                problems.append("kubectl kustomize deploy/ builds other objects than its files hold")
    if problems:
        fail(
            "deploy/ is out of sync with charts/metacontroller "
            "(run `hack/helm_chart.py gen-deploy`):\n" + "\n".join(problems)
        )
    print(f"deploy/ matches the chart: {len(want)} objects" + (", kustomize agrees" if kubectl else ""))


# --- render / install -------------------------------------------------------


def cmd_render(args: argparse.Namespace) -> None:
    values = load_values(args.values, args.set_json)
    try:
        objects = render_objects(values, args.release, args.namespace)
    except helm.HelmError as e:
        fail(f"render failed: {e}")
    json.dump(objects, sys.stdout, indent=1, sort_keys=True)
    print()


def config(args: argparse.Namespace) -> helm.Config:
    return helm.Config(kubeconfig_path=args.kubeconfig, namespace=args.namespace)


def cmd_install(args: argparse.Namespace) -> None:
    values = load_values(args.values, args.set_json)
    with config(args) as cfg:
        try:
            if args.cmd == "install":
                release = cfg.install(
                    str(CHART), args.release, values, namespace=args.namespace,
                    create_namespace=True, timeout=args.timeout,
                )
            else:
                release = cfg.upgrade(
                    str(CHART), args.release, values, namespace=args.namespace,
                    timeout=args.timeout,
                )
        except helm.HelmError as e:
            fail(f"helm {args.cmd} failed: {e}")
    release.pop("manifest", None)
    print(json.dumps(release, sort_keys=True))


def cmd_uninstall(args: argparse.Namespace) -> None:
    with config(args) as cfg:
        try:
            result = cfg.uninstall(args.release, timeout=args.timeout)
        except helm.HelmError as e:
            fail(f"helm uninstall failed: {e}")
    print(json.dumps(result.get("release", {}).get("status", "")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("lint").set_defaults(func=cmd_lint)
    sub.add_parser("gen-deploy").set_defaults(func=cmd_gen_deploy)
    sub.add_parser("check-deploy").set_defaults(func=cmd_check_deploy)
    for name, func in [("render", cmd_render), ("install", cmd_install), ("upgrade", cmd_install), ("uninstall", cmd_uninstall)]:
        p = sub.add_parser(name)
        p.add_argument("--release", default=DEFAULT_RELEASE)
        p.add_argument("--namespace", default=DEFAULT_NAMESPACE)
        if name != "render":
            p.add_argument("--kubeconfig", required=True)
            p.add_argument("--timeout", type=int, default=60, help="seconds")
        if name != "uninstall":
            p.add_argument("--values", help="a values file")
            p.add_argument("--set-json", help="values as a JSON object, merged over --values")
        p.set_defaults(func=func)
    args = parser.parse_args()
    os.chdir(ROOT)
    args.func(args)


if __name__ == "__main__":
    main()
