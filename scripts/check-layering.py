#!/usr/bin/env python3
"""scripts/check-layering.py — the folders' dependencies run one way, as docs/architecture.md's table says.

The table (the rows between the `<!-- layers -->` markers) lists each folder with the folders it may use, lowest
first. This script fails when:
  - a row names a folder that is not listed above it (the table itself must be a DAG, in order);
  - a source file includes a header of a folder its row does not name (`#include "folder/..."`);
  - an object file uses a symbol defined in a folder its row does not name (nm over the build's objects:
    the symbol-level check catches what includes miss, e.g. calls through a declaration in the public header);
  - a row names a folder that no file of it uses (a stale row is a wrong row).
`api` in a row means the public headers (include/*.h): only functions and variables declared there, and the
folders that define them do not count as used. Subfolders belong to their top folder (backends/cpu -> backends).

usage: check-layering.py SOURCE_DIR BUILD_DIR [NM]
"""
import os
import re
import subprocess
import sys

SRC_EXT = (".c", ".h")
CLI = ("tools", "server")  # the gemma command: outside the library


def read_table(src):
    text = open(os.path.join(src, "docs", "architecture.md"), encoding="utf-8").read()
    m = re.search(r"<!-- layers -->(.*?)<!-- /layers -->", text, re.S)
    if not m:
        sys.exit("check-layering: docs/architecture.md has no <!-- layers --> table")
    rows = []
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        folder = cells[0].strip("`/ ")
        deps = [d.strip("` /") for d in cells[2].split(",") if d.strip() not in ("", "—", "-")]
        rows.append((folder, deps))
    return rows


def folder_of(path):
    return path.split("/", 1)[0]


def include_edges(src, folders):
    """(folder, used folder, file) for every quoted include of another folder's header."""
    inc = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/')
    for folder in folders:
        root = os.path.join(src, folder)
        for dirpath, _, files in os.walk(root):
            for name in files:
                if not name.endswith(SRC_EXT):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, src)
                for line in open(path, encoding="utf-8", errors="replace"):
                    m = inc.match(line)
                    if m and m.group(1) != folder:
                        yield folder, m.group(1), rel


def api_names(src):
    names = set()
    decl = re.compile(r"\b(gm_[a-z0-9_]+)\s*\(")
    inc = os.path.join(src, "include")
    for name in os.listdir(inc):
        if name.endswith(".h"):
            names.update(decl.findall(open(os.path.join(inc, name), encoding="utf-8").read()))
    return names


def objects(build, src):
    """(source path relative to src, object path) of the library's and the CLI's objects whose source exists."""
    base = os.path.join(build, "CMakeFiles")
    for target in ("gemma_objs.dir", "gemma.dir", "gemma_cli.dir"):
        root = os.path.join(base, target)
        for dirpath, _, files in os.walk(root):
            for name in files:
                if not name.endswith(".c.o"):
                    continue
                obj = os.path.join(dirpath, name)
                rel = os.path.relpath(obj, root)[: -len(".o")]
                if os.path.exists(os.path.join(src, rel)):
                    yield rel, obj


def nm_symbols(nm, obj):
    out = subprocess.run([nm, obj], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRVWCGS":  # global definitions (upper case)
            defined.add(parts[2])
    return defined, undefined


def symbol_edges(src, build, nm, api):
    objs = list(objects(build, src))
    if not objs:
        sys.exit(f"check-layering: no object files under {build}/CMakeFiles (build first)")
    owner, uses = {}, []
    for rel, obj in objs:
        defined, undefined = nm_symbols(nm, obj)
        for s in defined:
            owner.setdefault(s, folder_of(rel))
        uses.append((rel, undefined))
    for rel, undefined in uses:
        folder = folder_of(rel)
        for s in sorted(undefined):
            if s in owner and owner[s] != folder:
                # the CLI reaches the library through the public header; the library's folders by their table
                public = folder in CLI and s in api
                yield folder, ("api" if public else owner[s]), rel, s


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    src, build = sys.argv[1], sys.argv[2]
    nm = sys.argv[3] if len(sys.argv) > 3 else "nm"
    rows = read_table(src)
    allowed, seen, errors = {}, [], []
    for folder, deps in rows:
        for d in deps:
            if d != "api" and d not in seen:
                errors.append(f"docs/architecture.md: `{folder}` may use `{d}`, which is not listed above it")
        allowed[folder] = set(deps)
        seen.append(folder)
    used = {f: set() for f in allowed}
    api = api_names(src)
    for folder, dep, rel in include_edges(src, [f for f in allowed if os.path.isdir(os.path.join(src, f))]):
        if dep == "include":
            dep = "api"
        if dep not in allowed[folder]:
            errors.append(f"{rel}: includes a header of {dep}/, which {folder}/ may not use")
        used[folder].add(dep)
    for folder, dep, rel, sym in symbol_edges(src, build, nm, api):
        if folder not in allowed:
            continue
        if dep not in allowed[folder]:
            errors.append(f"{rel}: uses {sym} (defined in {dep}/), which {folder}/ may not use")
        used[folder].add(dep)
    for folder, deps in rows:
        for d in sorted(set(deps) - used[folder]):
            errors.append(f"docs/architecture.md: `{folder}` lists `{d}`, which none of its files uses (a stale row)")
    for e in errors:
        print("FAIL", e)
    if errors:
        return 1
    print(f"ok: {len(rows)} folders, every include and symbol use goes down the table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
