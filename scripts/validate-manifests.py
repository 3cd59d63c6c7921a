#!/usr/bin/env python3
"""Independent schema validation of rendered manifests (run by scripts/test-all.sh).

Every YAML file under DIR must be exactly one object, and must pass:
  * core kinds (Service, Deployment, StatefulSet, NetworkPolicy, PodDisruptionBudget,
    Ingress): `kubernetes-validate --strict` for the given Kubernetes version;
  * CelldFleet, CelldBucketReservation: the openAPIV3Schema of our CRDs (from
    `celld-gen crds`), with unknown fields refused;
  * HTTPRoute: the openAPIV3Schema of the Gateway API CRD, unknown fields refused;
  * kustomization.yaml: apiVersion/kind, a sorted list of resources that all exist.
Any other kind fails. CEL rules (x-kubernetes-validations) are not evaluated here: the
generator's own validator and the end-to-end tests against a real API server cover them.

Usage: validate-manifests.py DIR --crds CRDS.json --gateway-crds DIR -k 1.37.0 [--install]
Exit 0 when every file passes, 1 otherwise. The last line is "N passed, M failed".
"""

import argparse
import glob
import json
import os
import subprocess
import sys

import jsonschema
import yaml

CORE = {
    ("v1", "Service"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("networking.k8s.io/v1", "Ingress"),
    ("policy/v1", "PodDisruptionBudget"),
}
# The install bundle's other kinds (`--install`): also the API server's own, so checked
# by kubernetes-validate for the version, which knows which of them that version serves.
INSTALL = {
    ("v1", "Namespace"),
    ("v1", "ServiceAccount"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
}


def strict(schema):
    """A copy of an OpenAPI v3 CRD schema in which every object that lists its properties
    refuses others (what the API server would prune silently), except where the schema
    preserves unknown fields."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "properties":
            out[key] = {name: strict(s) for name, s in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = strict(value)
        else:
            # anyOf/oneOf/allOf branches and everything else are kept as they are.
            out[key] = value
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_validator(crd, version):
    """(apiVersion, kind, namespaced, validator) for one served version of a CRD."""
    spec = crd["spec"]
    for v in spec["versions"]:
        if v["name"] == version:
            schema = dict(v["schema"]["openAPIV3Schema"])
            props = dict(schema.get("properties", {}))
            # Every object may carry these; CRD schemas usually leave them implicit.
            props.setdefault("apiVersion", {"type": "string"})
            props.setdefault("kind", {"type": "string"})
            props["metadata"] = {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1, "maxLength": 253},
                    "namespace": {"type": "string", "minLength": 1, "maxLength": 63},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "annotations": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                    },
                },
                "required": ["name"],
            }
            schema["properties"] = props
            api_version = f"{spec['group']}/{version}"
            return (
                api_version,
                spec["names"]["kind"],
                spec["scope"] == "Namespaced",
                jsonschema.Draft7Validator(strict(schema)),
            )
    raise SystemExit(f"CRD {spec['names']['kind']} has no version {version}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--crds", required=True, help="JSON array of our CRDs (celld-gen crds)")
    ap.add_argument("--gateway-crds", required=True, help="directory of Gateway API CRDs")
    ap.add_argument("-k", "--kubernetes-version", required=True)
    ap.add_argument(
        "--install",
        action="store_true",
        help="DIR holds the install bundle: its RBAC, admission policies and CRDs are core kinds too",
    )
    args = ap.parse_args()
    core = CORE | INSTALL if args.install else CORE

    validators = {}
    with open(args.crds) as f:
        for crd in json.load(f):
            av, kind, namespaced, v = crd_validator(crd, "v1alpha1")
            validators[(av, kind)] = (namespaced, v)
    gateway = None
    for path in glob.glob(os.path.join(args.gateway_crds, "*.yaml")):
        with open(path) as f:
            for crd in yaml.safe_load_all(f):
                if crd and crd.get("spec", {}).get("names", {}).get("kind") == "HTTPRoute":
                    gateway = crd
    if gateway is None:
        raise SystemExit(f"no HTTPRoute CRD in {args.gateway_crds}")
    av, kind, namespaced, v = crd_validator(gateway, "v1")
    validators[(av, kind)] = (namespaced, v)

    files = sorted(glob.glob(os.path.join(args.dir, "**", "*.yaml"), recursive=True))
    if not files:
        raise SystemExit(f"no YAML files under {args.dir}")
    passed, failed = 0, 0
    core_files = []

    def fail(path, why):
        nonlocal failed
        failed += 1
        print(f"FAIL {path}: {why}")

    for path in files:
        with open(path) as f:
            try:
                docs = [d for d in yaml.safe_load_all(f) if d is not None]
            except yaml.YAMLError as e:
                fail(path, f"not YAML: {e}")
                continue
        if len(docs) != 1 or not isinstance(docs[0], dict):
            fail(path, f"expected exactly one object, found {len(docs)} documents")
            continue
        obj = docs[0]
        key = (obj.get("apiVersion"), obj.get("kind"))
        if os.path.basename(path) == "kustomization.yaml":
            resources = obj.get("resources")
            base = os.path.dirname(path)
            if key != ("kustomize.config.k8s.io/v1beta1", "Kustomization"):
                fail(path, f"unexpected {key}")
            elif set(obj) != {"apiVersion", "kind", "resources"} or not isinstance(resources, list):
                fail(path, "a kustomization lists apiVersion, kind and resources only")
            elif resources != sorted(resources):
                fail(path, "resources are not sorted")
            elif missing := [r for r in resources if not os.path.exists(os.path.join(base, r))]:
                fail(path, f"lists missing resources {missing}")
            else:
                passed += 1
                print(f"PASS {path} (kustomization)")
        elif key in core:
            core_files.append(path)
        elif key in validators:
            namespaced, validator = validators[key]
            errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
            has_ns = "namespace" in obj.get("metadata", {})
            if errors:
                e = errors[0]
                where = "/".join(str(p) for p in e.absolute_path)
                fail(path, f"{len(errors)} schema errors; first at /{where}: {e.message}")
            elif namespaced != has_ns:
                fail(path, f"{key[1]} is {'namespaced' if namespaced else 'cluster-scoped'}")
            else:
                passed += 1
                print(f"PASS {path} ({key[1]}, CRD schema)")
        else:
            fail(path, f"no schema for {key}")

    if core_files:
        exe = os.path.join(os.path.dirname(sys.executable), "kubernetes-validate")
        proc = subprocess.run(
            [exe, "--strict", "-k", args.kubernetes_version, *core_files],
            capture_output=True,
            text=True,
        )
        lines = (proc.stdout + proc.stderr).splitlines()
        for path in core_files:
            mine = [l for l in lines if f" {path} " in l or l.endswith(f" {path}")]
            ok = any(l.startswith("INFO") and "passed" in l for l in mine)
            bad = [l for l in mine if not (l.startswith("INFO") and "passed" in l)]
            if ok and not bad and proc.returncode == 0:
                passed += 1
                print(f"PASS {path} (kubernetes-validate --strict -k {args.kubernetes_version})")
            else:
                fail(path, "; ".join(bad) or f"kubernetes-validate exited {proc.returncode}")
        if proc.returncode != 0 and failed == 0:
            fail("kubernetes-validate", "\n".join(lines))

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
