#!/usr/bin/env python3
"""check_architecture.py SRCDIR BUILDDIR: the layering docs/architecture.md
draws, checked against the code.

 1. Layers call only downward.  Every source file belongs to the layer of
    its folder; LAYERS below says which layers each may use.  An edge is an
    #include "..." of another file's header, or a reference from one
    object file to a symbol another defines (read with nm from BUILDDIR).
    A backend's folder (runtime/backend/ref, runtime/backend/cpu, ...) may be used
    by the registry alone: nothing else names a backend's functions.
 2. No circle between files: modules (a .c with its .h and its private
    x_impl.h; Flex's scanner and Bison's parser are one module, the
    grammar, since each needs the other's generated header) form no cycle
    of includes and calls.
 3. The map is whole: every source file's path appears in
    docs/architecture.md, and every source path the page names exists.
 4. No folder holds directly more than 30% of the non-test source lines.
 5. The map is true in its prose: every pass of the pipeline's table
    (passes/pipeline.c) and every backend of the registry (the `.name` of
    each table in runtime/backend/*/) is named, in backquotes, in
    docs/architecture.md.
 6. Every path that a source comment or a doc names exists: a path that
    starts with one of the tree's top folders (runtime/jit/nvrtc.c) must be
    a tracked file or folder; a shorter one (emu/emu_driver.c) must be the
    end of one.  Names of files a run writes (out/..., DIR/...) are not
    paths of the tree and are skipped.
 7. No function outside tests/ is longer than MAX_FUNCTION_LINES lines
    (from its signature to its closing brace, comments included).

Exit status 0 when all hold; otherwise every violation is printed and the
status is 1.  Tests are not checked: they test each layer from inside."""
import os
import re
import subprocess
import sys

# folder -> the folders its files may use (besides their own)
LAYERS = {
    'base': [],
    'ir': ['base'],
    'frontend': ['ir', 'base'],
    'passes': ['ir', 'base'],
    'codegen': ['passes', 'ir', 'base'],
    'codegen/c': ['codegen', 'passes', 'ir', 'base'],
    'codegen/cuda': ['codegen', 'passes', 'ir', 'base'],
    'report': ['codegen/cuda', 'codegen', 'passes', 'ir', 'base'],
    'runtime/formats': ['ir', 'base'],
    'runtime/data': ['runtime/formats', 'base'],
    'runtime/jit': ['base'],
    'runtime/comm': ['base'],
    'runtime/backend': ['ir', 'base'],
    'runtime/backend/ref': ['runtime/backend', 'runtime/comm', 'ir', 'base'],
    'runtime/backend/cpu': ['runtime/backend', 'runtime/comm', 'runtime/jit', 'codegen/c', 'codegen', 'passes', 'ir', 'base'],
    'runtime/cuda': ['runtime/jit', 'base'],
    'runtime/cuda/emu': ['runtime/cuda', 'runtime/jit', 'runtime/comm', 'base'],
    'runtime/backend/cuda': ['runtime/backend', 'runtime/cuda', 'runtime/cuda/emu', 'runtime/comm', 'runtime/jit', 'codegen/cuda',
                          'codegen', 'passes', 'ir', 'base'],
    'runtime/backend/registry': ['runtime/backend', 'runtime/backend/ref', 'runtime/backend/cpu', 'runtime/backend/cuda', 'base'],
    'runtime/train': ['runtime/backend/registry', 'runtime/backend', 'runtime/data', 'runtime/formats', 'runtime/comm',
                      'report', 'frontend', 'passes', 'ir', 'base'],
    'tools': ['runtime/train', 'runtime/backend/registry', 'runtime/backend', 'runtime/data', 'runtime/formats', 'runtime/jit',
              'runtime/comm', 'report', 'codegen/c', 'codegen/cuda', 'codegen', 'frontend', 'passes', 'ir', 'base'],
}
SOURCE_EXT = ('.c', '.h', '.l', '.y', '.def', '.cpp', '.hpp')
# generated from the grammar: header -> the file it comes from
GENERATED = {'parser.h': 'frontend/parser.y', 'lexer.h': 'frontend/lexer.l'}
GROUPS = {'frontend/parser': 'frontend/grammar', 'frontend/lexer': 'frontend/grammar'}
MAX_SHARE = 0.30
MAX_FUNCTION_LINES = 120
# the tree's top folders: a path in a comment or doc that starts with one is a path of the tree
TOP = ('base', 'ir', 'frontend', 'passes', 'codegen', 'report', 'runtime', 'tools', 'tests', 'bench', 'docs', 'models', 'configs')
# the start of a name of something a run writes, not a file of the tree
WRITTEN = ('out/', 'out_dir/', 'DIR/', 'sys/', 'linux/')


def source_files(src):
    out = []
    for layer in LAYERS:
        d = os.path.join(src, layer)
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            if f.endswith(SOURCE_EXT) and os.path.isfile(os.path.join(d, f)):
                out.append(layer + '/' + f)
    return out


def module(path):
    stem = os.path.splitext(path)[0]
    if stem.endswith('_impl'):  # a module's private header: x_impl.h belongs to x
        stem = stem[:-len('_impl')]
    return GROUPS.get(stem, stem)


def main():
    src, build = sys.argv[1], sys.argv[2]
    problems = []
    files = source_files(src)
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    for name, where in by_name.items():
        if len(where) > 1:
            problems.append('header name %s is in more than one folder: %s' % (name, ', '.join(where)))

    edges = {}  # (from file, to file) -> why

    # includes
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    for f in files:
        text = open(os.path.join(src, f), encoding='utf-8', errors='replace').read()
        for name in inc.findall(text):
            base = os.path.basename(name)
            if base in GENERATED:
                target = GENERATED[base]
            elif base in by_name:
                target = by_name[base][0]
            else:
                continue  # a system or build-directory header
            if target != f:
                edges.setdefault((f, target), '#include "%s"' % name)

    # symbol references between object files
    objs = {}
    for root, _, names in os.walk(os.path.join(build, 'CMakeFiles')):
        for n in names:
            if not n.endswith('.o'):
                continue
            full = os.path.join(root, n)
            rel = full.split('.dir/', 1)[1][:-2] if '.dir/' in full else None
            if rel in files:
                objs[rel] = full
            elif rel and os.path.basename(rel) in ('parser.c', 'lexer.c'):
                objs['frontend/' + ('parser.y' if rel.endswith('parser.c') else 'lexer.l')] = full
    if not objs:
        problems.append('no object files under %s/CMakeFiles: build first' % build)
    defined, used = {}, {}
    for f, o in objs.items():
        out = subprocess.run(['nm', '-P', o], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue
            sym, kind = parts[0], parts[1]
            if kind == 'U':
                used.setdefault(f, set()).add(sym)
            elif kind in 'TDBRCVW':
                defined.setdefault(sym, f)
    for f, syms in used.items():
        for s in sorted(syms):
            g = defined.get(s)
            if g and g != f:
                edges.setdefault((f, g), 'uses %s' % s)

    # 1. layers
    def folder(f):
        return os.path.dirname(f)
    for (a, b), why in sorted(edges.items()):
        fa, fb = folder(a), folder(b)
        if fa != fb and fb not in LAYERS.get(fa, []):
            problems.append('layering: %s (%s) %s of %s (%s), which %s may not use' % (a, fa, why, b, fb, fa))

    # 2. cycles between modules
    graph = {}
    for (a, b), why in edges.items():
        ma, mb = module(a), module(b)
        if ma != mb:
            graph.setdefault(ma, {}).setdefault(mb, (a, b, why))
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        # iterative Tarjan
        work = [(v, iter(graph.get(v, {})))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(graph.get(w, {}))))
                    advanced = True
                    break
                elif w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    sccs.append(comp)
    for v in sorted(set(graph) | {m for d in graph.values() for m in d}):
        if v not in index:
            strong(v)
    for comp in sccs:
        inside = set(comp)
        why = ['%s %s of %s' % (a, w, b) for m in sorted(comp) for n, (a, b, w) in sorted(graph.get(m, {}).items())
               if n in inside]
        problems.append('circle between %s: %s' % (', '.join(sorted(comp)), '; '.join(why)))

    # 3. the map
    doc = open(os.path.join(src, 'docs/architecture.md'), encoding='utf-8').read()
    mapped = files + [os.path.join('tools', f) for f in sorted(os.listdir(os.path.join(src, 'tools')))
                      if f.endswith(('.sh', '.py'))]
    for f in mapped:
        if f not in doc:
            problems.append('docs/architecture.md does not list %s' % f)
    for p in sorted(set(re.findall(r'\b((?:base|ir|frontend|passes|codegen|runtime|tools)/[\w/.-]+\.(?:c|h|l|y|def|cpp|hpp|sh|py))\b', doc))):
        if not os.path.exists(os.path.join(src, p)):
            problems.append('docs/architecture.md names %s, which does not exist' % p)

    # 4. folder sizes
    lines = {}
    for f in files:
        with open(os.path.join(src, f), encoding='utf-8', errors='replace') as fh:
            lines[folder(f)] = lines.get(folder(f), 0) + sum(1 for _ in fh)
    total = sum(lines.values())
    for d, n in sorted(lines.items()):
        if n > MAX_SHARE * total:
            problems.append('%s holds %d of %d source lines (%.0f%%, more than %.0f%%)' %
                            (d, n, total, 100.0 * n / total, 100 * MAX_SHARE))

    problems += named_in_prose(src, doc)
    problems += dangling_paths(src)
    problems += long_functions(src)

    for p in problems:
        print('FAIL: ' + p)
    print('architecture: %d source files in %d folders, %d edges between files, %d lines; largest folder %s (%.0f%%)' %
          (len(files), len(lines), len(edges), total, max(lines, key=lines.get), 100.0 * max(lines.values()) / total))
    print('architecture: %s' % ('%d problems' % len(problems) if problems else 'all checks hold'))
    return 1 if problems else 0


def named_in_prose(src, doc):
    """Check 5: the passes and the backends, each named in the map's prose."""
    out = []
    text = open(os.path.join(src, 'passes/pipeline.c'), encoding='utf-8').read()
    table = re.search(r'static const \w+ passes\[\] = \{(.*?)\n\};', text, re.S)
    names = re.findall(r'^\s*\{\{?"(\w+)"', table.group(1), re.M) if table else []
    if not names:
        out.append('cannot read the pass table of passes/pipeline.c (static const ... passes[] = {...})')
    for name in names:
        if '`%s`' % name not in doc:
            out.append('docs/architecture.md does not name the pass `%s` (passes/pipeline.c)' % name)
    backends = []
    for root, _, fnames in os.walk(os.path.join(src, 'runtime/backend')):
        for fn in sorted(fnames):
            if fn.endswith('.c'):
                backends += re.findall(r'\.name\s*=\s*"([\w-]+)"', open(os.path.join(root, fn), encoding='utf-8').read())
    if not backends:
        out.append('found no backend (.name = "...") under runtime/backend')
    for name in backends:
        if '`%s`' % name not in doc:
            out.append('docs/architecture.md does not name the backend `%s` (runtime/backend)' % name)
    return out


C_COMMENT = re.compile(r'/\*.*?\*/|//[^\n]*', re.S)
HASH_COMMENT = re.compile(r'(?:^|\s)#[^\n]*')


def comment_text(path, text):
    """The comments of a source file, or the whole of a doc."""
    if path.endswith('.md'):
        return text
    if path.endswith(('.c', '.h', '.l', '.y', '.def', '.cpp', '.hpp', '.cuh')):
        return '\n'.join(C_COMMENT.findall(text))
    if path.endswith(('.sh', '.py', '.cmake', '.cfg', '.tg')) or os.path.basename(path) == 'CMakeLists.txt':
        out = '\n'.join(HASH_COMMENT.findall(text))
        if path.endswith('.py'):
            out += '\n'.join(re.findall(r'"""(.*?)"""', text, re.S))
        return out
    return ''


def tracked_files(src):
    try:
        listed = subprocess.run(['git', '-C', src, 'ls-files'], capture_output=True, text=True, check=True).stdout
        return [f for f in listed.split() if os.path.isfile(os.path.join(src, f))]
    except (OSError, subprocess.CalledProcessError):  # not a checkout: every file below src
        return [os.path.relpath(os.path.join(r, f), src) for r, _, fs in os.walk(src) for f in fs
                if '/.git' not in r and not r.startswith(os.path.join(src, 'build'))]


def dangling_paths(src):
    """Check 6: every path a comment or a doc names exists."""
    files = tracked_files(src)
    existing = set(files)
    ext = r'(?:c|h|l|y|def|cpp|hpp|cuh|sh|py|md|tg|cfg|cmake)'
    full = re.compile(r'(?<![\w./$-])((?:%s)/(?:[\w-]+/)*[\w.-]+\.%s)(?![\w/])' % ('|'.join(TOP), ext))
    partial = re.compile(r'(?<![\w./$-])((?:[\w-]+/)+[\w-]+\.(?:c|h|l|y|def|cpp|hpp|cuh))(?![\w/])')
    out = []
    for f in files:
        if f.startswith('tests/golden') or '/corpus' in f:
            continue
        text = comment_text(f, open(os.path.join(src, f), encoding='utf-8', errors='replace').read())
        for p in set(full.findall(text)):
            if p not in existing and not os.path.isdir(os.path.join(src, p)):
                out.append('%s names %s, which does not exist' % (f, p))
        for p in set(partial.findall(text)):
            if p.split('/')[0] in TOP or p.startswith(WRITTEN):
                continue
            if os.path.normpath(os.path.join(os.path.dirname(f), p)) in existing:
                continue
            if not any(e.endswith('/' + p) for e in existing):
                out.append('%s names %s, which is the end of no path in the tree' % (f, p))
    return sorted(out)


def blank_comments_and_strings(text):
    """C text with comments and string and character literals blanked (their
    newlines kept), so that braces inside them do not count."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
        elif text[i] in '"\'':
            q, j = text[i], i + 1
            while j < n and text[j] != q:
                j += 2 if text[j] == '\\' else 1
            j += 1
        else:
            out.append(text[i])
            i += 1
            continue
        out.append(re.sub(r'[^\n]', ' ', text[i:j]))
        i = j
    return ''.join(out)


def function_lengths(path):
    """(lines, first line, name) of each function defined at file level."""
    lines = blank_comments_and_strings(open(path, encoding='utf-8', errors='replace').read()).split('\n')
    depth, start, found = 0, None, []
    for ln, line in enumerate(lines):
        if line.lstrip().startswith('#'):
            continue
        for ch in line:
            if ch == '{':
                if depth == 0:
                    k = ln  # the signature starts after the last declaration, brace or blank line
                    while k > 0 and lines[k - 1].strip() and not lines[k - 1].rstrip().endswith((';', '}')) \
                            and not lines[k - 1].lstrip().startswith('#'):
                        k -= 1
                    head = ' '.join(x.strip() for x in lines[k:ln + 1]).split('{')[0]
                    is_function = head.rstrip().endswith(')') and '=' not in head.split('(')[0]
                    start = (k, re.findall(r'(\w+)\s*\(', head)) if is_function else None
                depth += 1
            elif ch == '}':
                depth -= 1
                if depth == 0 and start:
                    k, names = start
                    found.append((ln - k + 1, k + 1, names[0] if names else '?'))
                    start = None
    return found


def long_functions(src):
    """Check 7: no function outside tests/ over MAX_FUNCTION_LINES lines."""
    out = []
    for f in tracked_files(src):
        if f.startswith('tests/') or not f.endswith(('.c', '.h', '.cpp', '.hpp', '.cuh')):
            continue
        for n, first, name in function_lengths(os.path.join(src, f)):
            if n > MAX_FUNCTION_LINES:
                out.append('%s:%d: %s is %d lines long (at most %d): split it' % (f, first, name, n, MAX_FUNCTION_LINES))
    return out


if __name__ == '__main__':
    sys.exit(main())
