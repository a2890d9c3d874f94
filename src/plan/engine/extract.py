#!/usr/bin/env python3
"""Extract what the pinned vLLM and SGLang releases accept and expose.

For each pinned wheel this reads the engine's own Python sources straight out
of the wheel zip and prints one JSON table (releases.json beside this file):

  flags / boolean_flags  the option strings `vllm serve` and
                         `python3 -m sglang.launch_server` accept
  kv_connectors          vLLM's registered KV connector names
  transfer_backends      SGLang's --disaggregation-transfer-backend choices
  environment            environment variables the engine reads
  paths                  HTTP paths its OpenAI-compatible server registers
  metrics                Prometheus metric names it defines

Why statically: importing vllm or sglang pulls in torch, CUDA libraries and
hundreds of MB of dependencies, and runs platform detection that changes the
parser.  The sources are the contract, so this script parses them with `ast`
and follows the few patterns the engines use to build their parsers (literal
add_argument calls, dataclass fields turned into flags).  It never installs or
imports an engine.  Wheels are fetched with pip (by name and version, from
PyPI) and checked against the pinned sha256 before anything is read.

Not seen, by design: what only exists at run time (flags a plugin or the
platform's pre_register_and_update adds, argparse's own -h/--help, FastAPI's
/docs, /redoc and /openapi.json), and metrics defined outside the metrics
modules named below.  Counters are listed by the name the source gives them
(prometheus_client adds "_total" on export).

    python3 src/plan/engine/extract.py --cache DIR > src/plan/engine/releases.json

Exit codes: 0 ok, 1 wrong wheel / extraction error, 3 PyPI unreachable.
"""
import argparse
import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile

# (engine, release, wheel file name, sha256)
PINS = [
    ("vllm", "0.11.0", "vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl",
     "3861c75ff2b12e24f6d179ff5c084d791b42ded8675d76c8706697c79f68cd62"),
    ("vllm", "0.34.0", "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl",
     "79ca4b3cd74aec08c4bf476bdf0cb15735b605ae5368526a2faae1e30f044ca2"),
    ("sglang", "0.5.2", "sglang-0.5.2-py3-none-any.whl",
     "83aae146f3913ed0802bb1ea356facff47efe0e7d18041a3f143de9ef6e44b2c"),
    ("sglang", "0.5.23", "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
     "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"),
]

# pip's messages when PyPI could not be reached at all.
NETWORK_ERROR = re.compile(
    r"NewConnectionError|Failed to establish a new connection|ProxyError|"
    r"Temporary failure in name resolution|Name or service not known|"
    r"ConnectTimeoutError|ReadTimeoutError|Max retries exceeded|"
    r"connection broken|Network is unreachable|Connection refused")


class Unreachable(Exception):
    pass


class Fatal(Exception):
    pass


# --------------------------------------------------------------------------
# Fetching
# --------------------------------------------------------------------------

def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(engine, release, wheel, sha, cache):
    """Return the path of the pinned wheel in `cache`, downloading it if needed."""
    path = os.path.join(cache, wheel)
    if os.path.exists(path):
        if sha256_of(path) == sha:
            return path
        os.remove(path)  # stale or corrupt copy: pip would keep it otherwise
    platform = wheel[:-len(".whl")].split("-")[-1]  # the wheel's platform tag
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps",
           "--only-binary=:all:", "--platform", platform,
           "--python-version", "3.11", "--implementation", "cp",
           "--retries", "2", "--timeout", "30", "-d", cache,
           f"{engine}=={release}"]
    env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if run.returncode != 0:
        out = run.stdout + run.stderr
        if NETWORK_ERROR.search(out):
            raise Unreachable(f"pip could not reach PyPI for {engine}=={release}")
        raise Fatal(f"pip download {engine}=={release} failed:\n{out}")
    if not os.path.exists(path):
        raise Fatal(f"pip did not fetch the pinned file {wheel} into {cache}")
    digest = sha256_of(path)
    if digest != sha:
        raise Fatal(f"sha256 mismatch for {wheel}: got {digest}, pinned {sha}")
    return path


# --------------------------------------------------------------------------
# Reading sources out of a wheel
# --------------------------------------------------------------------------

class Wheel:
    def __init__(self, path):
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())
        self._trees = {}

    def text(self, name):
        return self.zip.read(name).decode("utf-8-sig")

    def tree(self, name):
        if name not in self._trees:
            self._trees[name] = ast.parse(self.text(name), name)
        return self._trees[name]

    def module_file(self, module):
        base = module.replace(".", "/")
        for name in (base + ".py", base + "/__init__.py"):
            if name in self.names:
                return name
        return None

    def module(self, module):
        return self.tree(self.module_file(module))

    def files_in(self, directory, recursive=False):
        return sorted(n for n in self.names if n.startswith(directory)
                      and n.endswith(".py")
                      and (recursive or "/" not in n[len(directory):]))


def top_level(body):
    """Module-level statements, including those inside if/try blocks."""
    for st in body:
        if isinstance(st, ast.If):
            yield from top_level(st.body + st.orelse)
        elif isinstance(st, ast.Try):
            yield from top_level(st.body + st.orelse + st.finalbody
                                 + [s for h in st.handlers for s in h.body])
        else:
            yield st


def absolute(w, module, node):
    """The absolute module name an ImportFrom in `module` names."""
    if not node.level:
        return node.module
    pkg = module if w.module_file(module).endswith("__init__.py") \
        else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        pkg = pkg.rpartition(".")[0]
    return pkg + ("." + node.module if node.module else "")


def lookup(w, module, name, depth=0):
    """Find the top-level definition of `name` seen from `module`, following
    `from X import name` re-exports. Returns (module, node) or None."""
    if depth > 8 or not w.module_file(module):
        return None
    body = list(top_level(w.module(module).body))
    for st in body:
        if isinstance(st, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and st.name == name:
            return module, st
        if isinstance(st, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in st.targets):
            return module, st.value
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) \
                and st.target.id == name and st.value is not None:
            return module, st.value
    for st in body:
        if isinstance(st, ast.ImportFrom):
            for alias in st.names:
                if (alias.asname or alias.name) == name:
                    return lookup(w, absolute(w, module, st), alias.name, depth + 1)
    for st in body:  # from .common import *
        if isinstance(st, ast.ImportFrom) and st.names[0].name == "*":
            found = lookup(w, absolute(w, module, st), name, depth + 1)
            if found:
                return found
    return None


def literal(w, module, node):
    """Evaluate a literal expression, resolving names to module constants."""
    if isinstance(node, ast.Name):
        found = lookup(w, module, node.id)
        return literal(w, *found) if found and isinstance(found[1], ast.expr) else None
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [literal(w, module, e) for e in node.elts]
        return None if any(i is None for i in items) else items
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = literal(w, module, node.left), literal(w, module, node.right)
        return left + right if isinstance(left, list) and isinstance(right, list) else None
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return None


def last_name(node):
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def class_fields(w, module, cls, seen=()):
    """{field: (module, annotation)} of a dataclass-like class and its bases."""
    out = {}
    for base in cls.bases:
        found = lookup(w, module, last_name(base) or "")
        if found and isinstance(found[1], ast.ClassDef) and found[1].name not in seen:
            out.update(class_fields(w, found[0], found[1], seen + (cls.name,)))
    for st in cls.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) \
                and not re.match(r"(typing\.)?(ClassVar|InitVar)\b", ast.unparse(st.annotation)):
            out[st.target.id] = (module, st.annotation)
    return out


def union_members(w, module, node, depth=0):
    """Flatten Optional/Union/`|`/Annotated and type aliases into member names:
    "bool", "str", "None", "dataclass", or the head of any other type."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        node = ast.parse(node.value, mode="eval").body  # forward reference
    if isinstance(node, ast.Constant) and node.value is None:
        return ["None"]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return (union_members(w, module, node.left, depth)
                + union_members(w, module, node.right, depth))
    if isinstance(node, ast.Subscript):
        head = last_name(node.value)
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head == "Optional":
            return union_members(w, module, args[0], depth) + ["None"]
        if head == "Union":
            return [m for a in args for m in union_members(w, module, a, depth)]
        if head in ("Annotated", "A", "SkipValidation"):  # Annotated[T, ...] at run time
            return union_members(w, module, args[0], depth)
        return [head]
    name = last_name(node)
    if name in ("bool", "str", "int", "float", "None") or depth > 5:
        return [name]
    found = lookup(w, module, name or "")
    if found and isinstance(found[1], ast.ClassDef):
        decorators = " ".join(ast.unparse(d) for d in found[1].decorator_list)
        return ["dataclass" if re.search(r"dataclass|config", decorators) else name]
    if found and isinstance(found[1], ast.expr):  # a type alias
        return union_members(w, found[0], found[1], depth + 1)
    return [name]


def action_takes_no_value(w, module, action, nargs):
    """(no_value, negatable) for an add_argument's action= and nargs= nodes."""
    if nargs is not None:
        return literal(w, module, nargs) == 0, False
    if action is None:
        return False, False
    if isinstance(action, ast.Constant):
        return action.value in ("store_true", "store_false", "store_const",
                                "append_const", "count", "help", "version"), False
    if last_name(action) == "BooleanOptionalAction":
        return True, True
    found = lookup(w, module, last_name(action) or "")
    if found and isinstance(found[1], ast.ClassDef):  # a custom argparse.Action
        if any(last_name(b) == "BooleanOptionalAction" for b in found[1].bases):
            return True, True
        for fn in found[1].body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                a = fn.args
                named = a.args[len(a.args) - len(a.defaults):] + a.kwonlyargs
                defaults = a.defaults + a.kw_defaults
                for arg, default in zip(named, defaults):
                    if arg.arg == "nargs":
                        return literal(w, module, default) == 0, False
    return False, False


class Flags:
    """The option strings a parser accepts, and which of them take no value."""

    def __init__(self, inverse_prefixes=None):
        self.flags, self.boolean, self.choices = set(), set(), {}
        self.inverse_prefixes = inverse_prefixes or {}

    def add(self, options, no_value=False, negatable=False, choices=None):
        options = {o for o in options if o.startswith("-")}
        if negatable:  # argparse.BooleanOptionalAction adds --no-<flag>
            options |= {"--no-" + o[2:] for o in options if o.startswith("--")}
            # vLLM 0.34's EnableDisableAction also pairs --enable-x/--disable-x
            for prefix, inverse in self.inverse_prefixes.items():
                options |= {inverse + o[len(prefix):] for o in options
                            if o.startswith(prefix)}
        self.flags |= options
        if no_value:
            self.boolean |= options
        if choices is not None:
            self.choices.update(dict.fromkeys(options, choices))


# --------------------------------------------------------------------------
# vLLM flags
# --------------------------------------------------------------------------

def vllm_field_kind(w, module, cls_name, field, optional_value_branch):
    """How vllm.engine.arg_utils.get_kwargs turns a config field into argparse
    kwargs: "bool" (BooleanOptionalAction) or "value"."""
    found = lookup(w, module, cls_name)
    fields = class_fields(w, *found) if found else {}
    if field not in fields:
        raise Fatal(f"{cls_name}.{field} not found (from {module})")
    members = set(union_members(w, *fields[field]))
    if "dataclass" in members:
        return "value"  # parsed as JSON
    if optional_value_branch and members == {"bool", "str", "None"}:
        return "value"  # 0.34: nargs="?", const=True (e.g. --hf-token)
    return "bool" if "bool" in members else "value"


class VllmParserScan:
    """Walks the functions that build `vllm serve`'s parser: literal
    add_argument calls, `**X_kwargs["field"]` spreads of get_kwargs(Config),
    loops over literal lists, and the FrontendArgs loop that turns every
    dataclass field `foo_bar` into `--foo-bar`.  Follows calls to
    make_arg_parser(...) and Cls.add_cli_args(...)."""

    def __init__(self, w, flags, optional_value_branch):
        self.w, self.out, self.optional_value_branch = w, flags, optional_value_branch
        self.done, self.module, self.cls_ctx = set(), None, None
        self.kwargs_vars, self.overrides = {}, {}

    def scan(self, module, fn, cls_ctx=None):
        if (module, fn.lineno, cls_ctx) in self.done:
            return
        self.done.add((module, fn.lineno, cls_ctx))
        saved = self.module, self.cls_ctx, self.kwargs_vars, self.overrides
        self.module, self.cls_ctx, self.kwargs_vars, self.overrides = module, cls_ctx, {}, {}
        assigns = [n for n in ast.walk(self.w.module(module))
                   if isinstance(n, ast.Assign) and len(n.targets) == 1]
        for _ in range(2):  # twice: overrides may precede the variable they use
            for n in assigns:
                self.note_assign(n.targets[0], n.value)
        self.visit(fn, {})
        self.module, self.cls_ctx, self.kwargs_vars, self.overrides = saved

    def kwargs_source(self, value):
        """(Class, field|None) an expression built from get_kwargs(Class) denotes:
        get_kwargs(Cls), get_kwargs(Cls)["f"], X["f"] or a variable holding one."""
        if isinstance(value, ast.Call) and last_name(value.func) == "get_kwargs":
            cls = last_name(value.args[0])
            return (self.cls_ctx if cls == "cls" else cls), None
        if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant):
            base = self.kwargs_source(value.value)
            if base and base[1] is None:
                return base[0], value.slice.value
        if isinstance(value, ast.Name):
            return self.kwargs_vars.get(value.id)
        return None

    def note_assign(self, target, value):
        if isinstance(target, ast.Name):
            src = self.kwargs_source(value)
            if src:
                self.kwargs_vars[target.id] = src
        # X_kwargs["field"]["action"] = ...  replaces the derived action
        elif isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) \
                and target.slice.value == "action":
            src = self.kwargs_source(target.value)
            if src and src[1]:
                self.overrides[src] = value

    def visit(self, node, bound):
        bindings = self.loop_bindings(node) if isinstance(node, ast.For) else []
        if bindings:
            for binding in bindings:
                for st in node.body:
                    self.visit(st, {**bound, **binding})
            return
        if isinstance(node, ast.Call) and last_name(node.func) == "add_argument":
            self.add_argument(node, bound)
        elif isinstance(node, ast.Call) and last_name(node.func) in ("add_cli_args",
                                                                     "make_arg_parser"):
            self.follow(node)
        for child in ast.iter_child_nodes(node):
            self.visit(child, bound)

    def loop_bindings(self, node):
        names = [last_name(t) for t in
                 (node.target.elts if isinstance(node.target, ast.Tuple) else [node.target])]
        if isinstance(node.iter, (ast.List, ast.Tuple)):  # for arg, type in [("--x", str)]
            return [{name: v.value for name, v in zip(
                        names, e.elts if isinstance(e, ast.Tuple) else [e])
                     if isinstance(v, ast.Constant)} for e in node.iter.elts]
        it = node.iter  # for key, value in frontend_kwargs.items()
        if isinstance(it, ast.Call) and last_name(it.func) == "items":
            src = self.kwargs_source(it.func.value)
            if src and src[1] is None:
                found = lookup(self.w, self.module, src[0])
                return [{names[0]: f, names[1]: ("kwargs", src[0], f)}
                        for f in class_fields(self.w, *found)]
        return []

    def follow(self, node):
        if isinstance(node.func, ast.Name):  # make_arg_parser(parser)
            found = lookup(self.w, self.module, node.func.id)
            if found and isinstance(found[1], ast.FunctionDef):
                self.scan(*found)
        elif isinstance(node.func.value, ast.Name):  # Cls.add_cli_args(parser)
            cls_name = node.func.value.id
            found = lookup(self.w, self.module, cls_name)
            while found and isinstance(found[1], ast.ClassDef):  # method may be inherited
                cls_mod, cls = found
                method = next((f for f in cls.body if isinstance(f, ast.FunctionDef)
                               and f.name == "add_cli_args"), None)
                if method:
                    self.scan(cls_mod, method, cls_name)
                    return
                found = cls.bases and lookup(self.w, cls_mod, last_name(cls.bases[0]))

    def add_argument(self, node, bound):
        options = []
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                options.append(arg.value)
            elif isinstance(arg, ast.Name) and isinstance(bound.get(arg.id), str):
                options.append(bound[arg.id])
            elif isinstance(arg, ast.JoinedStr):  # f"--{key.replace('_', '-')}"
                options.append(self.fstring(arg, bound))
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        action, source = kw.get("action"), None
        for spread in (k.value for k in node.keywords if k.arg is None):
            if isinstance(spread, ast.Dict):  # **{**X["f"], "default": None}
                for k, v in zip(spread.keys, spread.values):
                    if k is None:
                        source = self.kwargs_source(v) or source
                    elif isinstance(k, ast.Constant) and k.value == "action":
                        action = v
            elif isinstance(spread, ast.Name) and isinstance(bound.get(spread.id), tuple):
                source = bound[spread.id][1:]  # **value in the FrontendArgs loop
            else:
                source = self.kwargs_source(spread)
        if action is None and source in self.overrides:
            action = self.overrides[source]
        if action is not None or "nargs" in kw or not source:
            no_value, negatable = action_takes_no_value(
                self.w, self.module, action, kw.get("nargs"))
        else:
            kind = vllm_field_kind(self.w, self.module, source[0], source[1],
                                   self.optional_value_branch)
            no_value = negatable = kind == "bool"
        self.out.add(options, no_value, negatable)

    @staticmethod
    def fstring(node, bound):
        text = ""
        for part in node.values:
            if isinstance(part, ast.Constant):
                text += part.value
                continue
            expr = part.value
            if isinstance(expr, ast.Call) and last_name(expr.func) == "replace":
                old, new = (a.value for a in expr.args)
                text += bound[expr.func.value.id].replace(old, new)
            else:
                text += bound[expr.id]
        return text


def vllm_flags(w):
    """vLLM: `vllm serve` = vllm/entrypoints/cli/serve.py ServeSubcommand
    .subparser_init -> make_arg_parser (0.11: vllm/entrypoints/openai/cli_args.py;
    0.34: vllm/entrypoints/common/cli_args.py) -> FrontendArgs.add_cli_args +
    AsyncEngineArgs.add_cli_args -> EngineArgs.add_cli_args (vllm/engine/arg_utils.py)."""
    serve = "vllm.entrypoints.cli.serve"
    parser_mod, parser_cls = lookup(w, serve, "FlexibleArgumentParser")
    # 0.34 (vllm/utils/argparse_utils.py) registers EnableDisableAction for
    # BooleanOptionalAction: --enable-x also accepts --disable-x and vice versa.
    inverse = {}
    for node in ast.walk(parser_cls):
        if isinstance(node, ast.Call) and last_name(node.func) == "register" \
                and len(node.args) == 3 and last_name(node.args[1]) == "BooleanOptionalAction":
            found = lookup(w, parser_mod, last_name(node.args[2]))
            for st in found[1].body:
                if isinstance(st, ast.Assign) and last_name(st.targets[0]) == "_inverse_prefixes":
                    inverse = literal(w, found[0], st.value)
    flags = Flags(inverse)
    # 0.34's get_kwargs gives `bool | str | None` fields nargs="?" instead of
    # BooleanOptionalAction (vllm/engine/arg_utils.py _compute_kwargs).
    optional_branch = "{bool, str, type(None)}" in w.text("vllm/engine/arg_utils.py")
    scan = VllmParserScan(w, flags, optional_branch)
    serve_cls = lookup(w, serve, "ServeSubcommand")[1]
    init = next(f for f in serve_cls.body
                if isinstance(f, ast.FunctionDef) and f.name == "subparser_init")
    scan.scan(serve, init)
    # 0.34 dropped "-O" as an option string but FlexibleArgumentParser.parse_args
    # still rewrites "-O3" / "-O 3" to --optimization-level: it is accepted.
    for fn in parser_cls.body:
        if isinstance(fn, ast.FunctionDef) and fn.name == "parse_args":
            for node in ast.walk(fn):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and re.fullmatch(r"-[A-Za-z]", node.value):
                    flags.add([node.value])
    return flags


# --------------------------------------------------------------------------
# SGLang flags
# --------------------------------------------------------------------------

def sglang_literal_arguments(w, module, fn, flags):
    """Literal parser.add_argument("--x", "--alias", action=..., choices=...)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and last_name(node.func) == "add_argument":
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            options = [a.value for a in node.args if isinstance(a, ast.Constant)]
            no_value, negatable = action_takes_no_value(
                w, module, kw.get("action"), kw.get("nargs"))
            choices = literal(w, module, kw["choices"]) if "choices" in kw else None
            flags.add(options, no_value, negatable, choices)


def sglang_dataclass_arguments(w, module, flags):
    """0.5.23: sglang/srt/arg_groups/arg_utils.py add_cli_args_from_dataclass.
    ServerArgs' fields are those of the classes in server_args.py
    _INPUT_NAMESPACES (sglang/srt/arg_groups/fields/*.py).  A field becomes a
    flag when annotated A[T, "help"] or A[T, Arg(...)] without no_cli=True:
    names = [cli_name or --field-name] + aliases; an Arg action decides
    boolean-ness, else Literal/list take values and bool/Optional[bool] is
    store_true."""
    namespaces = lookup(w, module, "_INPUT_NAMESPACES")[1].elts
    classes = [lookup(w, module, n.id) for n in namespaces]
    classes.append(lookup(w, module, "ServerArgs"))
    for cls_mod, cls in classes:
        for field, (fmod, ann) in class_fields(w, cls_mod, cls).items():
            if not (isinstance(ann, ast.Subscript) and last_name(ann.value) in ("A", "Annotated")):
                continue
            typ, *meta = ann.slice.elts
            arg = None
            for m in meta:
                if isinstance(m, ast.Call) and last_name(m.func) == "Arg":
                    arg = {k.arg: k.value for k in m.keywords}
                    break
                if isinstance(m, (ast.Constant, ast.JoinedStr)):
                    arg = {}
                    break
            if arg is None or literal(w, fmod, arg.get("no_cli", ast.Constant(False))):
                continue
            cli_name = literal(w, fmod, arg["cli_name"]) if "cli_name" in arg else None
            names = [cli_name or "--" + field.replace("_", "-")]
            names += literal(w, fmod, arg["aliases"]) if "aliases" in arg else []
            members = [m for m in union_members(w, fmod, typ) if m != "None"]
            choices = literal(w, fmod, arg["choices"]) if "choices" in arg else None
            if choices is None:  # Literal[...] / Optional[Literal[...]]
                choices = next((literal(w, fmod, n.slice) for n in ast.walk(typ)
                                if isinstance(n, ast.Subscript)
                                and last_name(n.value) == "Literal"), None)
            if "action" in arg:
                extra = arg.get("action_kwargs")
                nargs = next((v for k, v in zip(extra.keys, extra.values)
                              if literal(w, fmod, k) == "nargs"), None) if extra else None
                no_value, negatable = action_takes_no_value(w, fmod, arg["action"], nargs)
            else:
                no_value, negatable = members == ["bool"], False
            flags.add(names, no_value, negatable, choices)


def sglang_flags(w):
    """SGLang: `python3 -m sglang.launch_server` parses with
    sglang/srt/server_args.py prepare_server_args -> ServerArgs.add_cli_args.
    0.5.2 writes every flag as a literal add_argument there; 0.5.23 derives
    most from dataclass fields and keeps a few literal ones."""
    module = "sglang.srt.server_args"
    flags = Flags()
    add_cli_args = next(f for f in lookup(w, module, "ServerArgs")[1].body
                        if isinstance(f, ast.FunctionDef) and f.name == "add_cli_args")
    sglang_literal_arguments(w, module, add_cli_args, flags)
    if any(isinstance(n, ast.Call) and last_name(n.func) == "add_cli_args_from_dataclass"
           for n in ast.walk(add_cli_args)):
        sglang_dataclass_arguments(w, module, flags)
    return flags


# --------------------------------------------------------------------------
# Everything else
# --------------------------------------------------------------------------

def vllm_kv_connectors(w):
    """KVConnectorFactory.register_connector("Name", ...) calls."""
    tree = w.tree("vllm/distributed/kv_transfer/kv_connector/factory.py")
    return sorted({n.args[0].value for n in ast.walk(tree)
                   if isinstance(n, ast.Call) and last_name(n.func) == "register_connector"
                   and n.args and isinstance(n.args[0], ast.Constant)})


def vllm_environment(w):
    """Keys of the `environment_variables` dict in vllm/envs.py."""
    for st in w.tree("vllm/envs.py").body:
        target = st.target if isinstance(st, ast.AnnAssign) else \
            st.targets[0] if isinstance(st, ast.Assign) else None
        if last_name(target) == "environment_variables" and isinstance(st.value, ast.Dict):
            return sorted(k.value for k in st.value.keys if isinstance(k, ast.Constant))
    raise Fatal("vllm/envs.py: environment_variables not found")


ENV_READ = re.compile(
    r"""(?:getenv|environ\.get|environ\.setdefault|environ\[|_env_var)\s*\(?\s*"""
    r"""["'](SGL(?:ANG)?_[A-Z0-9_]+)["']|["'](SGL(?:ANG)?_[A-Z0-9_]+)["']\s+(?:not\s+)?in\s+os\.environ""")


def sglang_environment(w):
    """0.5.23 has a registry (sglang/srt/environ.py class Envs: each attribute
    `NAME = EnvBool(...)` reads $NAME, and deprecated_name= its old spelling);
    0.5.2 has none.  Both also read literal names through os.getenv,
    os.environ, get_bool_env_var and friends anywhere in sglang/srt."""
    names = set()
    if "sglang/srt/environ.py" in w.names:
        envs = lookup(w, "sglang.srt.environ", "Envs")[1]
        for st in envs.body:
            if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call) \
                    and (last_name(st.value.func) or "").startswith("Env"):
                names.add(st.targets[0].id)
                names |= {k.value.value for k in st.value.keywords
                          if k.arg == "deprecated_name" and isinstance(k.value, ast.Constant)}
    for name in w.files_in("sglang/srt/", recursive=True):
        for m in ENV_READ.finditer(w.text(name)):
            names.add(m.group(1) or m.group(2))
    return sorted(names)


ROUTE_VERBS = {"get", "post", "put", "delete", "patch", "head", "options",
               "api_route", "route", "websocket"}
ROUTE_CALLS = {"add_api_route", "add_route", "add_websocket_route", "Mount",
               "Route", "WebSocketRoute", "mount"}


def route_paths(node):
    """Paths of @app.get("/x") decorators, add_api_route("/x"), Mount("/x")...
    A path read from the environment with a default (os.environ.get("X", "/y"))
    counts as its default."""
    found = set()
    for n in ast.walk(node):
        decorators = getattr(n, "decorator_list", [])
        calls = [d for d in decorators if isinstance(d, ast.Call)
                 and last_name(d.func) in ROUTE_VERBS]
        if isinstance(n, ast.Call) and last_name(n.func) in ROUTE_CALLS:
            calls.append(n)
        for call in calls:
            arg = call.args[0] if call.args else None
            if isinstance(arg, ast.Call) and last_name(arg.func) in ("get", "getenv") \
                    and len(arg.args) == 2:
                arg = arg.args[1]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
                    and arg.value.startswith("/"):
                found.add(arg.value)
    return found


# Modules reached from the entrypoint that run a *separate* HTTP server on
# another port; their routes are not the OpenAI-compatible server's.
SEPARATE_SERVERS = {
    "vllm.entrypoints.launchers.dp_supervisor",  # 0.34: --data-parallel-supervisor-port
    "sglang.srt.entrypoints.engine_info_bootstrap_server",  # 0.5.23: PD bootstrap
}


def runtime_nodes(node):
    """ast.walk, skipping `if TYPE_CHECKING:` bodies (never executed)."""
    for child in ast.iter_child_nodes(node):
        yield child
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            for st in child.orelse:
                yield from [st, *runtime_nodes(st)]
        else:
            yield from runtime_nodes(child)


def server_paths(w, entry, package):
    """Routes registered by the server's entry module and every module under
    `package` it imports (transitively, also inside functions, not under
    TYPE_CHECKING): vLLM 0.11 keeps them all in
    vllm/entrypoints/openai/api_server.py, vLLM 0.34 spreads them over
    api_router modules under vllm/entrypoints/, SGLang keeps them in
    sglang/srt/entrypoints/http_server.py plus a few included routers.  Functions
    those modules import from elsewhere and call are scanned too: that is how
    /metrics is mounted (sglang's add_prometheus_middleware)."""
    seen, todo, paths = set(), [entry], set()
    while todo:
        module = todo.pop()
        if module in seen or module in SEPARATE_SERVERS or not w.module_file(module):
            continue
        seen.add(module)
        tree = w.module(module)
        paths |= route_paths(tree)
        imported = {}
        for n in runtime_nodes(tree):
            if isinstance(n, ast.Import):
                todo += [a.name for a in n.names if a.name.startswith(package)]
            elif isinstance(n, ast.ImportFrom):
                base = absolute(w, module, n)
                for a in n.names:
                    if base.startswith(package):
                        todo += [base, base + "." + a.name]
                    else:
                        imported[a.asname or a.name] = (base, a.name)
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) \
                    and n.func.id in imported:
                found = lookup(w, *imported[n.func.id])
                if found and isinstance(found[1], ast.FunctionDef):
                    paths |= route_paths(found[1])
    return sorted(paths)


def metric_names(w, directory, prefix):
    """String constants that are exactly a metric name, e.g. "vllm:foo_bar"."""
    pattern = re.compile(re.escape(prefix) + r"[A-Za-z0-9_]+")
    return sorted({n.value for name in w.files_in(directory)
                   for n in ast.walk(w.tree(name))
                   if isinstance(n, ast.Constant) and isinstance(n.value, str)
                   and pattern.fullmatch(n.value)})


def vllm_release(w):
    flags = vllm_flags(w)
    return {
        "flags": sorted(flags.flags),
        "boolean_flags": sorted(flags.boolean),
        "kv_connectors": vllm_kv_connectors(w),
        "transfer_backends": [],
        "environment": vllm_environment(w),
        "paths": server_paths(w, "vllm.entrypoints.openai.api_server", "vllm.entrypoints"),
        "metrics": metric_names(w, "vllm/v1/metrics/", "vllm:"),
    }


def sglang_release(w):
    flags = sglang_flags(w)
    backends = flags.choices.get("--disaggregation-transfer-backend")
    if not backends:
        raise Fatal("--disaggregation-transfer-backend choices not found")
    # Metrics live in sglang/srt/metrics/ in 0.5.2, sglang/srt/observability/ in 0.5.23.
    metrics_dir = next(d for d in ("sglang/srt/metrics/", "sglang/srt/observability/")
                       if w.files_in(d))
    return {
        "flags": sorted(flags.flags),
        "boolean_flags": sorted(flags.boolean),
        "kv_connectors": [],
        "transfer_backends": sorted(b for b in backends if b is not None),
        "environment": sglang_environment(w),
        "paths": server_paths(w, "sglang.srt.entrypoints.http_server", "sglang.srt.entrypoints"),
        "metrics": metric_names(w, metrics_dir, "sglang:"),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", required=True, help="directory for the wheels")
    args = parser.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    table = {"generated_by": "src/plan/engine/extract.py", "releases": []}
    try:
        for engine, release, wheel, sha in PINS:
            w = Wheel(fetch(engine, release, wheel, sha, args.cache))
            row = {"engine": engine, "release": release, "wheel": wheel, "sha256": sha}
            row.update(vllm_release(w) if engine == "vllm" else sglang_release(w))
            table["releases"].append(row)
    except Unreachable as e:
        print(f"unreachable: {e}", file=sys.stderr)
        return 3
    except Fatal as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(json.dumps(table, indent=1, sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
