"""Write a compatibility shim for a moved module: every top-level name of the old module (as of git HEAD),
imported from the new module that defines it (or, failing that, the first new module that has it).

usage: python tools/make_shim.py OLD_MODULE_PATH NEW_PACKAGE_MODULE [NEW_MODULE ...]
"""
import ast, subprocess, sys, importlib, pathlib

old_path, *new_mods = sys.argv[1:]
src = subprocess.run(["git", "show", f"HEAD:{old_path}"], capture_output=True, text=True, check=True).stdout
tree = ast.parse(src)
names = []
skip = {"annotations", "np", "sp", "math", "json", "warnings", "dataclass", "field", "replace", "Any", "Mapping",
        "NamedTuple", "Sequence", "TYPE_CHECKING", "Path", "Iterable", "importlib", "dataclasses", "os", "pd",
        "expit", "hashlib"}
for n in tree.body:
    if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
        names.append(n.name)
    elif isinstance(n, ast.Assign):
        for t in n.targets:
            if isinstance(t, ast.Name):
                names.append(t.id)
    elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
        names.append(n.target.id)
    elif isinstance(n, ast.ImportFrom):
        names += [a.asname or a.name for a in n.names]
names = [n for n in dict.fromkeys(names) if n not in skip and not n.startswith("__") and n not in ("_MOVED", "_protocol")]
mods = [importlib.import_module(m) for m in new_mods]
by = {}
missing = []
for name in names:
    home = None
    for m in mods:
        v = getattr(m, name, None)
        if v is not None and getattr(v, "__module__", None) == m.__name__:
            home = m; break
    if home is None:
        for m in mods:
            if hasattr(m, name):
                home = m; break
    if home is None:
        missing.append(name); continue
    by.setdefault(home.__name__, []).append(name)
old_mod = old_path.replace("src/", "").replace(".py", "").replace("/", ".")
base = old_mod.rsplit(".", 1)[0]
lines = []
for m in new_mods:
    if m not in by: continue
    rel = "." + m[len(base) + 1:] if m.startswith(base + ".") else "..." + m[len("dpadmm."):]
    ns = sorted(by[m], key=lambda s: (s.lower(), s))
    body = ", ".join(ns)
    import textwrap
    wrapped = textwrap.fill(body, 112, initial_indent="    ", subsequent_indent="    ")
    lines.append(f"from {rel} import (  # noqa: F401\n{wrapped},\n)")
print("\n".join(lines))
if missing:
    print("# MISSING:", missing, file=sys.stderr)
