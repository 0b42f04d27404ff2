"""Move every dpadmm import inside a function of the given modules to the module's top (after its last top-level
import), deduplicated. Prints what it moved; check the result with ruff (F811/F401) and the cycle test.

usage: python tools/hoist_imports.py src/dpadmm/pkg/mod.py ...
"""
import ast
import pathlib
import sys


def is_dpadmm(node, path):
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").startswith("dpadmm")
    return any(a.name.startswith("dpadmm") for a in node.names)


for arg in sys.argv[1:]:
    path = pathlib.Path(arg)
    src = path.read_text()
    lines = src.splitlines(keepends=True)
    tree = ast.parse(src)
    inner = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in ast.walk(fn):
                if isinstance(n, (ast.Import, ast.ImportFrom)) and is_dpadmm(n, path):
                    inner.append(n)
    if not inner:
        continue
    # parents, to keep a block from becoming empty
    parent = {}
    for p in ast.walk(tree):
        for field in ("body", "orelse", "finalbody", "handlers"):
            value = getattr(p, field, None)
            for c in (value if isinstance(value, list) else []):
                parent[id(c)] = (p, field)
    seen, stmts, drop, replace_pass = set(), [], set(), {}
    for n in sorted(set(inner), key=lambda n: n.lineno):
        if id(n) in seen:
            continue
        seen.add(id(n))
        text = "".join(lines[n.lineno - 1:n.end_lineno])
        indent = len(text) - len(text.lstrip())
        body = "".join(l[indent:] if l[:indent].strip() == "" else l for l in lines[n.lineno - 1:n.end_lineno])
        # a trailing comment on the import line stays with it
        if body not in stmts:
            stmts.append(body)
        p, field = parent[id(n)]
        siblings = getattr(p, field)
        if all(s in inner for s in siblings):
            replace_pass[n.lineno] = " " * indent + "pass\n"
        for i in range(n.lineno - 1, n.end_lineno):
            drop.add(i)
        # a blank line right after an import that opened a function body goes too
        nxt = n.end_lineno
        if nxt < len(lines) and lines[nxt].strip() == "" and (n.lineno - 2 < 0 or lines[n.lineno - 2].rstrip().endswith((":", '"""')) or lines[n.lineno - 2].strip() == ""):
            drop.add(nxt)
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    insert_at = top[-1].end_lineno if top else 0
    out = []
    for i, l in enumerate(lines):
        if i in drop:
            if (i + 1) in replace_pass:
                out.append(replace_pass[i + 1])
            continue
        out.append(l)
        if i == insert_at - 1:
            out.extend(stmts)
    path.write_text("".join(out))
    print(path, len(inner), "hoisted:", "".join(stmts).replace("\n", " | "))
