#!/usr/bin/env python3
"""A fake Kubernetes API server, just enough for `tandem serve`'s reflectors and
controllers, so benches/memory_cached.sh can measure the memory of 1 000
cached objects of each kind without a cluster. Python 3.11 standard library.

It serves, over plain HTTP on loopback:
- LIST of any namespaced resource, cluster-wide or in one namespace, with
  equality label selectors and `limit`/`continue` pages (kube-runtime lists in
  pages of 500). InferenceServices, ScaleViews and ResourceScalingGroups hold
  COUNT objects each, made from the templates in WORLD; every other resource
  (LeaderWorkerSets, Deployments, Pods, PodGroups, ...) is an empty list.
- WATCH (`watch=true`): stays open, sending a BOOKMARK every
  --bookmark-seconds, until the client's timeoutSeconds. No other event is
  ever sent: what the controllers write does not come back to them.
- GET of one object; server-side apply, merge and JSON patches (the object
  is changed and stored, its resourceVersion bumped); POST (Events, kept so
  that a repeat can be patched into its series); DELETE.
- GET /fake/stats: requests so far by method, open watches, and every
  answer that was not 2xx.

Usage: memory_api.py WORLD COUNT PORT_FILE [--bookmark-seconds N] [--namespaces N]
WORLD is the JSON output of `tandem render -o json` holding one
InferenceService, one ScaleView and one ResourceScalingGroup; the port bound is
written to PORT_FILE once the server listens. The objects are in namespace ai,
or spread round robin over ai-0 ... ai-(N-1) with --namespaces N.
"""

import argparse
import copy
import hashlib
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

# The kinds with objects, by (group/version, plural).
KINDS = {
    ("fusioninfer.io/v1alpha1", "inferenceservices"): "InferenceService",
    ("fusioninfer.io/v1alpha1", "scaleviews"): "ScaleView",
    ("resourcescalinggroup.com/v1", "resourcescalinggroups"): "ResourceScalingGroup",
}
NAMESPACE = "ai"


class World:
    """The stored objects: (apiVersion, plural) -> (namespace, name) -> object."""

    def __init__(self):
        self.lock = threading.Lock()
        self.version = 1000
        self.objects = {}
        self.stats = {"requests": {}, "watches_open": 0, "watches_total": 0, "failures": []}

    def bump(self):
        self.version += 1
        return str(self.version)

    def count(self, key):
        with self.lock:
            self.stats["requests"][key] = self.stats["requests"].get(key, 0) + 1

    def fail(self, line):
        with self.lock:
            if len(self.stats["failures"]) < 50:
                self.stats["failures"].append(line)


def uid(name):
    digest = hashlib.sha256(name.encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def fields_v1(value):
    """The managedFields fieldsV1 set of a value, as the API server writes it."""
    if isinstance(value, dict):
        return {f"f:{k}": fields_v1(v) for k, v in value.items()}
    if isinstance(value, list):
        out = {}
        for item in value:
            if isinstance(item, dict) and "name" in item:
                out[f'k:{{"name":"{item["name"]}"}}'] = {".": {}, **fields_v1(item)}
            elif not isinstance(item, (dict, list)):
                out[f"v:{json.dumps(item)}"] = {}
        return out
    return {}


def stored(template, name, namespace, version, renames):
    """A copy of a rendered object as the API server would hold it after
    `kubectl apply` and Tandem's status write: uid, resourceVersion,
    generation, the last-applied-configuration annotation and managedFields."""
    text = json.dumps(template)
    for old, new in renames:
        text = text.replace(f'"{old}"', f'"{new}"')
    obj = json.loads(text)
    meta = obj.setdefault("metadata", {})
    meta["name"] = name
    meta["namespace"] = namespace
    applied = {k: v for k, v in obj.items() if k != "status"}
    applied["metadata"] = {"name": name, "namespace": namespace}
    meta.setdefault("annotations", {})[
        "kubectl.kubernetes.io/last-applied-configuration"
    ] = json.dumps(applied, separators=(",", ":"), sort_keys=True) + "\n"
    meta["uid"] = uid(f"{obj['kind']}/{name}")
    meta["resourceVersion"] = version
    meta["generation"] = 1
    meta["creationTimestamp"] = "2026-11-21T10:00:00Z"
    meta["managedFields"] = [
        {
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": obj["apiVersion"],
            "time": "2026-11-21T10:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                "f:spec": fields_v1(obj.get("spec", {})),
            },
        },
        {
            "manager": "tandem",
            "operation": "Update",
            "apiVersion": obj["apiVersion"],
            "time": "2026-11-21T10:00:01Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": fields_v1(obj.get("status", {}))},
            "subresource": "status",
        },
    ]
    return obj


def populate(world, rendered, count, namespaces):
    templates = {}
    for obj in rendered["apply"]:
        templates.setdefault(obj["kind"], obj)
    missing = {"InferenceService", "ScaleView", "ResourceScalingGroup"} - set(templates)
    if missing:
        sys.exit(f"the rendered world has no {', '.join(sorted(missing))}")
    service = templates["InferenceService"]["metadata"]["name"]
    view = templates["ScaleView"]["metadata"]["name"]
    group = templates["ResourceScalingGroup"]["metadata"]["name"]
    for (api_version, plural), kind in KINDS.items():
        collection = world.objects.setdefault((api_version, plural), {})
        for i in range(count):
            suffix = f"{i:04d}"
            # Each view targets its own service, and names its lock.
            renames = [(service, f"{service}-{suffix}"), (view, f"{view}-{suffix}")]
            name = {
                "InferenceService": f"{service}-{suffix}",
                "ScaleView": f"{view}-{suffix}",
                "ResourceScalingGroup": f"{group}-{suffix}",
            }[kind]
            # Object i of each kind is in the same namespace: ai, or ai-0,
            # ai-1, ... round robin when there are several.
            namespace = NAMESPACE if namespaces == 1 else f"{NAMESPACE}-{i % namespaces}"
            collection[(namespace, name)] = stored(
                templates[kind], name, namespace, world.bump(), renames
            )


def selected(obj, selector):
    labels = obj.get("metadata", {}).get("labels", {}) or {}
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def merge(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge(target.get(key), value)
    return target


def json_patch(target, operations):
    """The add, replace, remove and test operations of RFC 6902; False when a
    test fails or a path is missing."""
    for op in operations:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = target
        try:
            for part in parts[:-1]:
                parent = parent[int(part)] if isinstance(parent, list) else parent[part]
            last = parts[-1]
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                current = parent[index] if index < len(parent) else None
            else:
                index = last
                current = parent.get(last)
            if op["op"] == "test":
                if current != op["value"]:
                    return False
            elif op["op"] == "remove":
                del parent[index]
            elif op["op"] in ("add", "replace"):
                if isinstance(parent, list) and op["op"] == "add":
                    parent.insert(index, op["value"])
                else:
                    parent[index] = op["value"]
        except (KeyError, IndexError, ValueError, TypeError):
            return False
    return True


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    world: World = None
    bookmark_seconds = 10.0

    def log_message(self, *args):
        pass

    def send_json(self, code, body):
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        if code >= 300:
            self.world.fail(f"{self.command} {self.path} -> {code}: {body.get('message', '')}")

    def status(self, code, reason, message):
        self.send_json(code, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Failure", "message": message, "reason": reason, "code": code})

    def route(self):
        """(apiVersion, plural, namespace, name, subresource, query) or None."""
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if parts[0] == "api" and len(parts) >= 3:
            api_version, rest = parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            return None
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return api_version, plural, namespace, name, sub, query

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"null")

    def do_GET(self):
        if self.path == "/fake/stats":
            with self.world.lock:
                stats = copy.deepcopy(self.world.stats)
            return self.send_json(200, stats)
        route = self.route()
        if route is None:
            self.world.count("GET other")
            return self.status(404, "NotFound", f"no route {self.path}")
        api_version, plural, namespace, name, _, query = route
        collection = self.world.objects.get((api_version, plural), {})
        if name is not None:
            self.world.count("GET")
            with self.world.lock:
                obj = copy.deepcopy(collection.get((namespace, name)))
            if obj is None:
                return self.status(404, "NotFound", f'{plural} "{name}" not found')
            return self.send_json(200, obj)
        if query.get("watch") in ("true", "1"):
            self.world.count("WATCH")
            return self.watch(api_version, plural, float(query.get("timeoutSeconds", 290)))
        self.world.count("LIST")
        selector = query.get("labelSelector")
        with self.world.lock:
            items = [copy.deepcopy(o) for (ns, _), o in sorted(collection.items())
                     if (namespace is None or ns == namespace) and selected(o, selector)]
            version = str(self.world.version)
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items) or 1
        page = items[start:start + limit]
        meta = {"resourceVersion": version}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
            meta["remainingItemCount"] = len(items) - start - limit
        kind = KINDS.get((api_version, plural), plural)
        self.send_json(200, {"apiVersion": api_version, "kind": f"{kind}List",
                             "metadata": meta, "items": page})

    def watch(self, api_version, plural, timeout):
        kind = KINDS.get((api_version, plural), plural)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with self.world.lock:
            self.world.stats["watches_open"] += 1
            self.world.stats["watches_total"] += 1
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                with self.world.lock:
                    version = str(self.world.version)
                event = {"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                                                         "metadata": {"resourceVersion": version}}}
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                time.sleep(min(self.bookmark_seconds, max(0.0, deadline - time.monotonic())))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with self.world.lock:
                self.world.stats["watches_open"] -= 1

    def do_PATCH(self):
        self.world.count("PATCH")
        route = self.route()
        if route is None or route[3] is None:
            return self.status(404, "NotFound", f"no route {self.path}")
        api_version, plural, namespace, name, _, _ = route
        patch = self.body()
        content_type = self.headers.get("Content-Type", "")
        with self.world.lock:
            collection = self.world.objects.setdefault((api_version, plural), {})
            current = collection.get((namespace, name))
            if "apply-patch" in content_type:
                obj = copy.deepcopy(patch)
                meta = obj.setdefault("metadata", {})
                meta.setdefault("namespace", namespace)
                meta["uid"] = (current or {}).get("metadata", {}).get("uid") or uid(f"{plural}/{name}")
            elif current is None:
                obj = None
            elif "json-patch" in content_type:
                obj = copy.deepcopy(current)
                if not json_patch(obj, patch):
                    obj = "invalid"
            else:
                obj = merge(copy.deepcopy(current), patch)
            if isinstance(obj, dict):
                obj["metadata"]["resourceVersion"] = self.world.bump()
                collection[(namespace, name)] = obj
                obj = copy.deepcopy(obj)
        if obj is None:
            return self.status(404, "NotFound", f'{plural} "{name}" not found')
        if obj == "invalid":
            return self.status(422, "Invalid", "the JSON patch does not apply")
        self.send_json(200, obj)

    def do_POST(self):
        self.world.count("POST")
        route = self.route()
        if route is None:
            return self.status(404, "NotFound", f"no route {self.path}")
        api_version, plural, namespace, _, _, _ = route
        obj = self.body()
        meta = obj.setdefault("metadata", {})
        with self.world.lock:
            meta.setdefault("name", f"{meta.get('generateName', 'object-')}{self.world.bump()}")
            meta["uid"] = uid(meta["name"])
            meta["resourceVersion"] = self.world.bump()
            collection = self.world.objects.setdefault((api_version, plural), {})
            collection[(namespace, meta["name"])] = obj
            obj = copy.deepcopy(obj)
        self.send_json(201, obj)

    def do_DELETE(self):
        self.world.count("DELETE")
        route = self.route()
        if route is None or route[3] is None:
            return self.status(404, "NotFound", f"no route {self.path}")
        api_version, plural, namespace, name, _, _ = route
        with self.world.lock:
            gone = self.world.objects.get((api_version, plural), {}).pop((namespace, name), None)
        if gone is None:
            return self.status(404, "NotFound", f'{plural} "{name}" not found')
        self.send_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                             "status": "Success", "code": 200})


class Server(ThreadingHTTPServer):
    # The controllers open hundreds of connections at once; the default
    # listen backlog of 5 drops their SYNs and stalls them for seconds.
    request_queue_size = 4096
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that hangs up (serve stopping) is not an error here.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("world")
    parser.add_argument("count", type=int)
    parser.add_argument("port_file")
    parser.add_argument("--bookmark-seconds", type=float, default=10.0)
    parser.add_argument("--namespaces", type=int, default=1)
    args = parser.parse_args()
    world = World()
    with open(args.world) as f:
        populate(world, json.load(f), args.count, args.namespaces)
    Handler.world = world
    Handler.bookmark_seconds = args.bookmark_seconds
    server = Server(("127.0.0.1", 0), Handler)
    with open(args.port_file, "w") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
