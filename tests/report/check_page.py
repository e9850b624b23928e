#!/usr/bin/env python3
"""check_page.py: tgc --report html's page in a real browser (headless
Chromium through Selenium and chromedriver).

    check_page.py TGC SOURCE_DIR WORKDIR [--tgrun TGRUN] [--screenshot PNG]

Compiles GPT-2 124M (models/gpt2.tg) with --report html and opens the page:
no console error; every section is there and drawn (a table or an SVG in
each); clicking each .tg line that has kernels, and a line without, lights
exactly the kernels the manifest's "where" names for that line; clicking a
kernel lights its lines; the reports drawn from the passes' findings agree
with their text (fusion.txt's stops, a place that lights its line, the
memory plan, precision, the schedule; a tp=2 model's sharding rows); the
IR after autodiff and fuse, joined in the browser, is tgc --dump-after's
text; the page is under 5 MB.  Then a model with an error: tgc fails, its page
shows the error, its caret and the message tgc printed.  With --tgrun, a
4-step run's out_dir/report.html: its curves, samples and config.
--screenshot writes a PNG of GPT-2's page (docs/report.png).

Exit 77 (ctest's SKIP) when Chromium, chromedriver or Selenium is missing:
the browser test needs them (tools/install-deps.sh installs them)."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

SKIP = 77
SYSTEM_PYTHON = '/usr/bin/python3'
SECTIONS = ['summary', 'pipeline', 'source', 'graph', 'traffic', 'memory', 'collectives', 'reports', 'report-fusion',
            'report-memplan', 'report-schedule', 'report-precision', 'report-flash_attn', 'report-gelu']


def browser():
    chromium = shutil.which('chromium') or shutil.which('chromium-browser')
    driver = shutil.which('chromedriver')
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        # Debian's python3-selenium is the system Python's: a python3 of
        # one's own (pyenv, a venv) earlier in PATH does not see it
        if os.path.exists(SYSTEM_PYTHON) and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON):
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
        webdriver = None
    if not chromium or not driver or not webdriver:
        print('SKIP: the browser test needs chromium, chromedriver and python3-selenium '
              '(apt-get install chromium chromium-driver python3-selenium)')
        sys.exit(SKIP)
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ('--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--window-size=1400,1000',
              '--allow-file-access-from-files'):
        opts.add_argument(a)
    opts.set_capability('goog:loggingPrefs', {'browser': 'ALL'})
    return webdriver.Chrome(service=Service(driver), options=opts)


def lines_of(where):
    """The manifest's "gpt2.tg:27,30-31, std.tg:15" as {(file, line)}."""
    out = set()
    for part in filter(None, (where or '').split(', ')):
        file, _, ranges = part.rpartition(':')
        for r in ranges.split(','):
            a, _, b = r.partition('-')
            for n in range(int(a), int(b or a) + 1):
                out.add((file, n))
    return out


def console_errors(d):
    return [e for e in d.get_log('browser') if e['level'] == 'SEVERE']


def fail(msg):
    print('FAIL: ' + msg)
    sys.exit(1)


def check_sections(d):
    for s in SECTIONS:
        found = d.find_elements('id', s)
        if len(found) != 1:
            fail('section #%s: %d on the page' % (s, len(found)))
        drawn = d.execute_script(
            'var s = arguments[0]; return s.offsetHeight > 40 && s.querySelectorAll("table, svg, pre, .line").length > 0;',
            found[0])
        if not drawn:
            fail('section #%s is empty' % s)
    print('ok: the %d sections are drawn' % len(SECTIONS))


def check_lines(d, manifest):
    kernels = {int(k['kernel'][1:]): lines_of(k.get('where')) for k in manifest['kernels']}
    files = d.execute_script('return JSON.parse(document.getElementById("tg-data").textContent)'
                             '.sources.map(function (s) { return s.path.replace(/^.*\\//, ""); });')
    rows = d.execute_script('return Array.prototype.map.call(document.querySelectorAll(".line"), function (e) {'
                            ' return [+e.dataset.file, +e.dataset.line, e.classList.contains("has")]; });')
    with_kernels = [r for r in rows if r[2]]
    without = [r for r in rows if not r[2]][:3]
    if len(with_kernels) < 10:
        fail('only %d .tg lines have kernels' % len(with_kernels))
    tabs = d.find_elements('css selector', '#source .tabs button')
    clicked = 0
    for f, n, _ in with_kernels + without:
        tabs[f].click()
        d.find_element('css selector', '.line[data-file="%d"][data-line="%d"]' % (f, n)).click()
        lit = set(d.execute_script('return Array.prototype.map.call(document.querySelectorAll(".kernel.hl"),'
                                   ' function (e) { return +e.dataset.k; });'))
        want = {k for k, ls in kernels.items() if (files[f], n) in ls}
        if lit != want:
            fail('%s:%d lights kernels %s; the manifest lists %s' % (files[f], n, sorted(lit), sorted(want)))
        clicked += 1
    print('ok: %d .tg lines clicked, each lit exactly the manifest\'s kernels' % clicked)
    k = max(kernels, key=lambda k: len(kernels[k]))
    d.find_element('css selector', '.kernel[data-k="%d"]' % k).click()
    lit = d.execute_script('return Array.prototype.map.call(document.querySelectorAll(".line.hl"), function (e) {'
                           ' return [+e.dataset.file, +e.dataset.line]; });')
    if {(files[f], n) for f, n in lit} != kernels[k]:
        fail('kernel k%d lights lines %s; the manifest says %s' % (k, lit, sorted(kernels[k])))
    if not d.find_elements('css selector', '#source .detail pre'):
        fail('kernel k%d: no detail drawn' % k)
    print('ok: kernel k%d lights its %d lines and shows its detail' % (k, len(kernels[k])))


def check_graph(d):
    """Graphviz's drawing where dot is installed: a node per run of kernels
    (report.c's runs), a kernel's node opening the kernel; then the page's
    own layout, a repeated run opened."""
    runs = d.execute_script('return JSON.parse(document.getElementById("tg-data").textContent).runs.length;')
    if d.find_elements('css selector', '#graph .dot-layout svg'):
        nodes = d.find_elements('css selector', '#graph .dot-layout g.node')
        if len(nodes) != runs:
            fail('Graphviz drew %d nodes for %d runs of kernels' % (len(nodes), runs))
        d.find_element('css selector', '#graph .dot-layout g.node#k0').click()
        sel = d.execute_script('var e = document.querySelector(".kernel.sel"); return e && e.dataset.k;')
        if sel != '0':
            fail('clicking k0 in the Graphviz drawing selected %r' % sel)
        d.find_element('css selector', '#graph .to-own').click()
        print('ok: Graphviz drew the step\'s %d runs of kernels; k0 clicked there opened k0' % runs)
    else:
        print('ok: no Graphviz here: the page\'s own layout')
    tiles = len(d.find_elements('css selector', '#graph .own-layout .tile[data-k]'))
    d.find_element('css selector', '#graph .group').click()  # open a repeated run of layers
    opened = len(d.find_elements('css selector', '#graph .own-layout .tile[data-k]'))
    if opened <= tiles:
        fail('opening a run of layers drew %d kernels, before %d' % (opened, tiles))
    print('ok: the own layout: a repeated run opened, %d kernels drawn, before %d' % (opened, tiles))


def table_rows(d, css):
    """The rows (without the heading) of the tables under css, as lists of
    their cells' text."""
    return [[td.text for td in tr.find_elements('css selector', 'td')]
            for tr in d.find_elements('css selector', css + ' tr') if tr.find_elements('css selector', 'td')]


def open_details(d, section, summary_start):
    """Opens the <details> of a section whose summary starts so (its table
    is drawn when opened); returns the selector of its rows' table, once
    the table is there.  The page draws it on the details' toggle event,
    which the browser fires as a task of its own after the click returns
    (HTML: "queue a details toggle event task"), so reading the rows right
    after the click can find none: once in a while it did, and the memory
    plan read 0 buffers."""
    for i, det in enumerate(d.find_elements('css selector', '#%s details' % section)):
        summary = det.find_element('css selector', 'summary')
        if summary.text.startswith(summary_start):
            d.execute_script('arguments[0].scrollIntoView({block: "center"})', summary)  # not under the header
            summary.click()
            css = '#%s details:nth-of-type(%d) table' % (section, i + 1)
            deadline = time.time() + 10
            while not d.find_elements('css selector', css + ' tr td') and time.time() < deadline:
                time.sleep(0.05)
            return css
    fail('#%s has no details "%s..."' % (section, summary_start))


def check_reports(d, out):
    """The passes' reports drawn from their findings agree with the same
    findings as text (DIR/fusion.txt, --report memplan's lines): every stop
    of fusion and every buffer of the memory plan is a row; a stop's place
    lights its .tg line."""
    text = open(os.path.join(out, 'fusion.txt'), encoding='utf-8').read()
    stops = re.findall(r'^fusion: stop at %(\d+) (\S+) \(([^:]+):(\d+)\): not in k(\d+): (.*)$', text, re.M)
    rows = table_rows(d, open_details(d, 'report-fusion', 'every stop'))
    if len(rows) != len(stops) or not stops:
        fail('the fusion report on the page has %d stops, fusion.txt %d' % (len(rows), len(stops)))
    for row, stop in zip(rows, stops):
        node, op, file, line, kernel, why = stop
        if row[0] != '%' + node or row[1] != op or not row[2].startswith('%s:%s:' % (file, line)) or \
                row[3] != 'k' + kernel or row[4] != why:
            fail('a stop on the page %s is not fusion.txt\'s %s' % (row, stop))
    print('ok: fusion\'s %d stops on the page are fusion.txt\'s, place, kernel and reason' % len(stops))
    link = d.find_elements('css selector', '#report-fusion details table a.place')[0]
    f, n = link.get_attribute('data-file'), link.get_attribute('data-line')
    d.execute_script('arguments[0].scrollIntoView({block: "center"})', link)
    link.click()
    lit = d.execute_script('return Array.prototype.map.call(document.querySelectorAll(".line.hl"), function (e) {'
                           ' return e.dataset.file + ":" + e.dataset.line; });')
    if lit != ['%s:%s' % (f, n)]:
        fail('clicking the place %s lit the lines %s' % (link.text, lit))
    print('ok: clicking a stop\'s place %s lights its .tg line' % link.text)
    largest = table_rows(d, '#report-memplan > table:nth-of-type(2)')
    buffers = table_rows(d, open_details(d, 'report-memplan', 'every buffer'))
    if len(largest) != 10 or len(buffers) < 100:
        fail('the memory plan on the page: %d largest, %d buffers' % (len(largest), len(buffers)))
    print('ok: the memory plan\'s 10 largest and its %d buffers are drawn' % len(buffers))
    rules = table_rows(d, '#report-precision > table')
    if not rules or sum(int(r[1]) for r in rules) < 100:
        fail('the precision report on the page has rules %s' % rules)
    buckets = table_rows(d, '#report-schedule > table')
    if not buckets or any(not r[4] for r in buckets):
        fail('the schedule on the page: %s' % buckets)
    print('ok: precision\'s %d rules and the schedule\'s %d buckets are drawn' % (len(rules), len(buckets)))


def check_ir(d, tgc, src):
    """The IR after a pass, kept on the page as the nodes each pass changed, joined in the browser
    when its button is clicked: the text tgc --dump-after prints for the
    same step (bf16, the training step), for autodiff (a backward) and
    fuse (its kernels); every pass that ran has its button."""
    passes = [tr.find_elements('css selector', 'td')[0].text
              for tr in d.find_elements('css selector', '#pipeline tr') if tr.find_elements('css selector', 'td')]
    buttons = [b.get_attribute('data-pass') for b in d.find_elements('css selector', '#pipeline button.ir-open')]
    if buttons != passes or len(passes) < 10:
        fail('the IR buttons %s are not one per pass %s' % (buttons, passes))
    for name, must in (('autodiff', 'phase backward'), ('fuse', 'kernel k0 ')):
        button = d.find_element('css selector', '#pipeline button.ir-open[data-pass="%s"]' % name)
        d.execute_script('arguments[0].scrollIntoView({block: "center"})', button)
        button.click()
        shown = None
        for _ in range(100):  # drawn when the button is clicked
            shown = d.execute_script('var v = document.querySelector("#pipeline .ir-view");'
                                     'var p = v && v.dataset.pass === arguments[0] && v.querySelector("pre[data-ready]");'
                                     'return p ? p.textContent : null;', name)
            if shown is not None:
                break
            time.sleep(0.1)
        if shown is None:
            fail('the IR after %s was not shown' % name)
        want = subprocess.run([tgc, os.path.join(src, 'models/gpt2.tg'), '--grad', '--precision', 'bf16',
                               '--dump-after', name], check=True, stdout=subprocess.PIPE, text=True).stdout
        want = want[:want.rindex('# the IR above')]
        if shown != want or must not in shown or not re.search(r'^%\d+ = matmul ', shown, re.M):
            fail('the IR after %s on the page (%d bytes) is not tgc --dump-after %s\'s (%d bytes)' %
                 (name, len(shown), name, len(want)))
        print('ok: the IR after %s joined on the page: %d bytes, as tgc --dump-after %s prints them' %
              (name, len(shown), name))


def check_sharding(d, tgc, src, work):
    """A model with a tensor axis: its page has the sharding report, a row
    per line of `tgc --report sharding` (each split parameter, split value
    and collective)."""
    model, defs = os.path.join(src, 'models/gpt2.tg'), ['-D', 'n_layer=1', '-D', 'tp=2', '--precision', 'bf16']
    out = os.path.join(work, 'tp')
    subprocess.run([tgc, model] + defs + ['--report', 'html', '-o', out], check=True, stdout=subprocess.DEVNULL)
    text = subprocess.run([tgc, model] + defs + ['--report', 'sharding'], check=True, stdout=subprocess.PIPE,
                          text=True).stdout
    want = [l for l in text.splitlines() if l.startswith('  ')]
    d.get('file://' + os.path.join(out, 'index.html'))
    rows = table_rows(d, '#report-sharding table')
    if len(rows) != len(want) or not want:
        fail('the sharding report on the page has %d rows, --report sharding %d' % (len(rows), len(want)))
    if sum(r[0] == 'collective' for r in rows) != sum(l.split()[0] in ('all_reduce', 'all_max') for l in want):
        fail('the sharding report on the page has other collectives than --report sharding')
    errors = console_errors(d)
    if errors:
        fail('console errors on the tensor-parallel page: %s' % errors)
    print('ok: tensor parallelism\'s page: the sharding report\'s %d rows' % len(rows))


def check_good(d, tgc, src, work, screenshot):
    out = os.path.join(work, 'gpt2')
    subprocess.run([tgc, os.path.join(src, 'models/gpt2.tg'), '--report', 'html', '-o', out], check=True,
                   stdout=subprocess.DEVNULL)
    page = os.path.join(out, 'index.html')
    text = open(page, encoding='utf-8').read()
    if re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', text):
        fail('the page fetches something')
    d.get('file://' + page)
    if d.execute_script('return document.body.getAttribute("data-ready")') != '1':
        fail('the page\'s script did not finish')
    check_sections(d)
    check_lines(d, json.load(open(os.path.join(out, 'manifest.json'))))
    check_graph(d)
    check_reports(d, out)
    check_ir(d, tgc, src)
    size = os.path.getsize(page)
    if size >= 5 << 20:
        fail('GPT-2 124M\'s page is %d bytes, over 5 MB' % size)
    print('ok: GPT-2 124M\'s page is %d bytes (under 5 MB)' % size)
    errors = console_errors(d)
    if errors:
        fail('console errors: %s' % errors)
    print('ok: no console errors on GPT-2\'s page')
    if screenshot:  # the source beside its kernels, a row kernel (layernorm) chosen
        d.set_window_size(1280, 900)
        d.execute_script('var D = JSON.parse(document.getElementById("tg-data").textContent);'
                         'var k = D.kernels.filter(function (k, i) { return k.kind === "row" && D.kernel_costs[i][6].length; })[0];'
                         'document.querySelector(\'.kernel[data-k="\' + k.id + \'"]\').click();'
                         'document.getElementById("source").scrollIntoView(); window.scrollBy(0, -70);')
        d.save_screenshot(screenshot)
        print('wrote ' + screenshot)


def check_bad(d, tgc, src, work):
    bad = os.path.join(src, 'tests/bad/undefined_config.tg')  # an unknown name, as cli_bad_inputs checks it
    out = os.path.join(work, 'bad')
    r = subprocess.run([tgc, bad, '--report', 'html', '-o', out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if r.returncode != 1:
        fail('a bad model: tgc exited %d' % r.returncode)
    message = next((l for l in r.stderr.splitlines() if ': error: ' in l), None)
    if not message:
        fail('a bad model: no error on stderr: %s' % r.stderr)
    d.get('file://' + os.path.join(out, 'index.html'))
    shown = d.find_element('css selector', '#error pre').text
    if message not in shown or '^' not in shown:
        fail('the error page shows %r, not the error %r with its caret' % (shown, message))
    line = int(message.split(':')[1])
    want = open(bad, encoding='utf-8').read().split('\n')[line - 1]
    lit = [e.text for e in d.find_elements('css selector', '#error .line.hl')]
    if len(lit) != 1 or want not in lit[0]:
        fail('the error page lights %r, not line %d of the model (%r)' % (lit, line, want))
    errors = console_errors(d)
    if errors:
        fail('console errors on the error page: %s' % errors)
    print('ok: the bad model\'s page shows %r' % message)
    # a model that fails in a pass: the passes that ran, autodiff stopped
    no_loss = os.path.join(work, 'no_loss.tg')
    with open(no_loss, 'w') as f:
        f.write('config { n = 2 }\ninput x: f32[n]\noutput y = sum(x)\n')
    subprocess.run([tgc, no_loss, '--report', 'html', '-o', os.path.join(work, 'no_loss')], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    d.get('file://' + os.path.join(work, 'no_loss', 'index.html'))
    rows = [[td.text for td in tr.find_elements('css selector', 'td')]
            for tr in d.find_elements('css selector', '#pipeline tr')][1:]
    if not rows or rows[-1][0] != 'autodiff' or rows[-1][5] != 'stopped here' or 'stopped here' in rows[-2]:
        fail('the page of a model failing in autodiff shows the passes %s' % rows)
    if "no output named 'loss'" not in d.find_element('css selector', '#error pre').text:
        fail('the page of a model failing in autodiff lacks its error')
    print('ok: a model failing in autodiff: %d passes ran, the page says autodiff stopped' % (len(rows) - 1))


RUN_CFG = """model = "models/gpt2.tg"
model.n_layer = 1
model.n_head = 2
model.n_embd = 32
model.block_size = 32
data_dir = "{data}"
batch_size = 4
block_size = 32
max_steps = 4
warmup_steps = 1
lr_decay_steps = 4
eval_interval = 2
eval_batches = 1
sample_interval = 2
sample_tokens = 20
checkpoint_interval = 0
threads = 1
"""


def check_run(d, tgrun, src, work):
    """A 4-step run on the CPU backend (the corpus: README.md, characters):
    its out_dir/report.html draws the curves, one point a step, the samples
    and the config, without a console error."""
    env = dict(os.environ, TG_CACHE=os.path.join(work, 'cache'))
    data = os.path.join(work, 'run_data')
    subprocess.run([tgrun, 'prepare', '--tokenizer', 'char', '--input', os.path.join(src, 'README.md'), '--out', data],
                   check=True, stdout=subprocess.DEVNULL, env=env, cwd=src)
    cfg = os.path.join(work, 'run.cfg')
    with open(cfg, 'w') as f:
        f.write(RUN_CFG.format(data=data))
    out = os.path.join(work, 'run')
    r = subprocess.run([tgrun, cfg, 'out_dir=' + out, 'overwrite=true'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, env=env, cwd=src)
    if r.returncode != 0:
        fail('the run failed: %s' % r.stdout[-2000:])
    if 'report    %s/report.html' % out not in r.stdout:
        fail('the log\'s last lines do not name report.html')
    d.get('file://' + os.path.join(out, 'report.html'))
    for s in ('run', 'curves', 'samples', 'config'):
        if not d.find_elements('id', s):
            fail('the run\'s page has no section #%s' % s)
    points = d.execute_script('var p = document.querySelector("#curves .series-train");'
                              'return p ? p.getAttribute("points").trim().split(" ").length : 0;')
    if points != 4:
        fail('the run\'s train loss curve has %d points, not one a step (4)' % points)
    first_sample = open(os.path.join(out, 'samples.txt'), encoding='utf-8').readline().strip()
    if first_sample not in d.find_element('css selector', '#samples pre').text:
        fail('the run\'s page does not show its samples (%r)' % first_sample)
    errors = console_errors(d)
    if errors:
        fail('console errors on the run\'s page: %s' % errors)
    print('ok: the run\'s report.html draws 4 steps of curves, its samples and config')


def main():
    args = sys.argv[1:]
    opt = {}
    for name in ('--screenshot', '--tgrun'):
        if name in args:
            i = args.index(name)
            opt[name] = args[i + 1]
            del args[i:i + 2]
    if len(args) != 3:
        print(__doc__)
        return 2
    tgc, src, work = args
    os.makedirs(work, exist_ok=True)
    d = browser()
    try:
        check_good(d, tgc, src, work, opt.get('--screenshot'))
        check_sharding(d, tgc, src, work)
        check_bad(d, tgc, src, work)
        if '--tgrun' in opt:
            check_run(d, opt['--tgrun'], src, work)
    finally:
        d.quit()
    print('ok: the page in a browser')
    return 0


if __name__ == '__main__':
    sys.exit(main())
