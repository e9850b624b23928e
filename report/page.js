/* page.js: draws tgc --report html's page from its JSON block (report.c
 * embeds this file, without this comment).  Plain script, no library:
 * every section is built from the data, its charts as inline SVG.  Each
 * section is a <section id=...> the browser test (tests/report) looks
 * for; a .tg line is a .line with data-file and data-line, a kernel in
 * the list a .kernel with data-k, and the ones a click lights get .hl. */

"use strict";
(function () {
  var D = JSON.parse(document.getElementById("tg-data").textContent);
  /* tgc writes what the kernels are before their code is made, and what
   * the code costs after (report.c): the costs go onto the kernels here */
  (D.kernels || []).forEach(function (k, i) {
    var c = (D.kernel_costs || [])[i] || [0, 0, 0, 0, 0, "", []];
    k.read = c[0]; k.written = c[1]; k.flops = c[2]; k.seconds = c[3]; k.launches = c[4]; k.category = c[5]; k.units = c[6];
  });
  var app = document.getElementById("app");
  var SVG = "http://www.w3.org/2000/svg";

  function el(tag, attrs, kids) {
    var e = document.createElement(tag);
    for (var a in attrs || {}) {
      if (a === "text") e.textContent = attrs[a];
      else if (a === "click") e.addEventListener("click", attrs[a]);
      else e.setAttribute(a, attrs[a]);
    }
    (kids || []).forEach(function (k) { if (k) e.appendChild(typeof k === "string" ? document.createTextNode(k) : k); });
    return e;
  }
  function svg(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    for (var a in attrs) e.setAttribute(a, attrs[a]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function bytes(n) {
    var u = ["B", "KB", "MB", "GB", "TB"], i = 0;
    while (Math.abs(n) >= 1000 && i < u.length - 1) { n /= 1000; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + u[i];
  }
  function si(n) {
    var u = ["", "K", "M", "G", "T", "P"], i = 0;
    while (Math.abs(n) >= 1000 && i < u.length - 1) { n /= 1000; i++; }
    return (i ? n.toFixed(2) : String(Math.round(n))) + u[i];
  }
  function time(s) { return s >= 1e-3 ? (s * 1e3).toFixed(2) + " ms" : (s * 1e6).toFixed(1) + " µs"; }
  function section(id, title) {
    var s = el("section", { id: id }, [el("h2", { text: title })]);
    app.appendChild(s);
    return s;
  }
  function table(head, rows, numeric) {
    var t = el("table", {}, [el("tr", {}, head.map(function (h, i) {
      return el("th", { "class": numeric && numeric[i] ? "n" : "", text: h });
    }))]);
    rows.forEach(function (r) {
      t.appendChild(el("tr", {}, r.map(function (c, i) {
        return el("td", { "class": numeric && numeric[i] ? "n" : "" }, [c instanceof Node ? c : String(c)]);
      })));
    });
    return t;
  }
  function basename(p) { return p.replace(/^.*\//, ""); }

  var nav = el("nav");
  app.appendChild(el("header", {}, [el("h1", { text: D.run ? "tg: a run of " + D.model + " in " + D.run.out_dir
                                                       : "tg: what the compiler did with " + D.model }), nav]));
  function link(id, text) { nav.appendChild(el("a", { href: "#" + id, text: text })); }

  /* ---- a model that failed: the error, the caret view, the passes that ran */
  function drawError() {
    link("error", "error");
    link("pipeline", "passes");
    var s = section("error", "The model did not compile");
    s.appendChild(el("pre", { "class": "error", text: D.error }));
    s.appendChild(el("p", { "class": "muted", text: "command: " + D.command }));
    /* the first error's place in its file, with the lines around it */
    var at = /^(.*?):(\d+):(\d+): error/m.exec(D.error);
    var src = at && D.sources.filter(function (f) { return f.path === at[1]; })[0];
    if (src) {
      var n = +at[2], lines = src.text.split("\n"), box = el("div", { "class": "pane" });
      for (var i = Math.max(1, n - 4); i <= Math.min(lines.length, n + 4); i++)
        box.appendChild(el("div", { "class": "line" + (i === n ? " hl" : "") },
                           [el("span", { "class": "no", text: String(i) }), lines[i - 1]]));
      s.appendChild(el("h3", { text: basename(src.path) + ", around line " + n }));
      s.appendChild(box);
    }
  }

  /* ---- the IR after each pass (report.c's ir_after): a pass's entry is
   * [pass, 1] for the text of the pass before, else [pass, 0, head, the
   * nodes' numbers in order and their kernels (each as runs: first,
   * length; a run of numbers steps by one, of kernels by none), [[number,
   * phase, op, inputs' numbers, middle, place] a node new or changed
   * since the pass before], [[quoted name, number] an output]].  Joined
   * here into tgc --dump-after's text, as ir/print.c prints it: a line a
   * node numbered by its position, a phase line before each node whose
   * phase is not the last one's. */
  function runs(r, step) {
    var v = [];
    for (var i = 0; i < r.length; i += 2)
      for (var k = 0; k < r[i + 1]; k++) v.push(r[i] + step * k);
    return v;
  }
  var irTexts = [];
  function irText(i) {
    if (irTexts[i] !== undefined) return irTexts[i];
    var nodes = {}, at = -1;
    for (var j = 0; j <= i; j++) {
      var x = D.ir_after[j];
      if (x[1]) continue;
      at = j;
      x[5].forEach(function (c) { nodes[c[0]] = c; });
    }
    var e = D.ir_after[at], order = runs(e[3], 1), kernel = runs(e[4], 0), pos = {}, out = [e[2]], phase = 0;
    order.forEach(function (id, k) { if (id >= 0) pos[id] = k; });
    function ref(id) { return id >= 0 && pos[id] !== undefined ? "%" + pos[id] : "%?"; }
    order.forEach(function (id, k) {
      if (id < 0) { out.push("%" + k + " = <null>\n"); return; }
      var c = nodes[id];
      if (c[1] !== phase) { phase = c[1]; out.push("phase " + D.ir_phases[phase] + "\n"); }
      out.push("%" + k + " = " + c[2] + (c[3].length ? " " + c[3].map(ref).join(", ") : "") + c[4] +
               (kernel[k] >= 0 ? " in k" + kernel[k] : "") + c[5] + "\n");
    });
    e[6].forEach(function (o) { out.push("output " + o[0] + " = " + ref(o[1]) + "\n"); });
    return (irTexts[i] = out.join(""));
  }
  function showIr(i, view) {
    var name = D.ir_after[i][0], text = irText(i);
    view.textContent = "";
    view.setAttribute("data-pass", name);
    view.appendChild(el("h3", { text: "The IR after " + name + " (" + bytes(new TextEncoder().encode(text).length) +
                                      "; tgc --dump-after " + name + ")" }));
    var pre = el("pre", { "class": "ir-text", text: text });
    pre.setAttribute("data-ready", "1");
    view.appendChild(pre);
  }
  function drawPipeline() {
    var s = section("pipeline", "Pipeline: the passes, in order");
    var view = el("div", { "class": "ir-view" }), irOf = {};
    (D.ir_after || []).forEach(function (e, i) { irOf[e[0]] = i; });
    var rows = D.passes.map(function (p) {
      var i = irOf[p.name];
      return [p.name, p.what, p.before, p.seconds < 0 ? "—" : p.after, p.seconds < 0 ? "—" : p.kernels,
              p.seconds < 0 ? "stopped here" : time(p.seconds),
              i === undefined ? "—" : el("button", { "class": "ir-open", "data-pass": p.name, text: "IR after",
                                                     click: function () { showIr(i, view); } })];
    });
    s.appendChild(table(["pass", "what it does", "nodes before", "after", "kernels", "time", "its IR"], rows,
                        [0, 0, 1, 1, 1, 1, 0]));
    s.appendChild(view);
    if (!D.passes.length) s.appendChild(el("p", { text: "No pass ran: the model stopped in the frontend." }));
    if (D.ir) {
      s.appendChild(el("details", { "class": "ir" }, [el("summary", { text: "The IR after " + D.ir_pass }),
                                                    el("pre", { text: D.ir })]));
    }
    if (D.ir_after && D.ir_after.length) s.appendChild(el("p", { "class": "muted",
      text: "The IR after each pass is on this page, as the nodes each pass changed: its button writes out the text (tgc --dump-after PASS prints the same)." }));
  }

  function drawSummary() {
    link("summary", "summary"); link("pipeline", "pipeline"); link("source", "source & kernels");
    link("graph", "step graph"); link("traffic", "traffic"); link("memory", "memory");
    link("collectives", "collectives"); link("reports", "reports");
    var s = section("summary", "Summary");
    var launches = D.launches.length, matmuls = 0;
    D.launches.forEach(function (l) { if (l[1] === "cuBLASLt matmul") matmuls++; });
    var T = D.totals, tokens = 1;
    D.config.forEach(function (c) { if (c[0] === "B" || c[0] === "T") tokens *= c[1]; });
    var phases = D.phases.map(function (p) { return p[0] + " " + time(p[1]); }).join(", ");
    var total = D.phases.reduce(function (a, p) { return a + p[1]; }, 0);
    var rows = [
      ["model", D.model], ["command", D.command],
      ["config", D.config.map(function (c) { return c[0] + "=" + c[1]; }).join(" ")],
      ["parameters", si(D.params) + " (" + bytes(D.param_bytes) + ")"], ["precision", D.precision],
      ["graph", D.nodes + " nodes, " + D.kernels.length + " kernels"],
      ["launches", launches + " a step (" + matmuls + " cuBLASLt matmuls), " + D.cuda.length + " distinct CUDA functions"],
      ["per step", bytes(T.read) + " read, " + bytes(T.written) + " written, " + si(T.flops) + "FLOP"],
      ["roofline on " + D.gpu.name, time(T.seconds) + " a step, " + si(tokens / T.seconds) + " tokens/s at most" +
        (T.flagged ? "; " + T.flagged + " launches flagged" : "")],
      ["memory", "arena " + bytes(D.memory.arena) + " (and scratch " + bytes(D.memory.scratch) + "), most live at once " + bytes(D.memory.live) +
        ", without reuse " + bytes(D.memory.sum) + "; parameters, inputs and state " + bytes(D.memory.persistent)],
      ["all-reduce", D.buckets.length + " buckets"],
      ["compile time", time(total) + ": " + phases]
    ];
    s.appendChild(table(["", ""], rows));
  }

  /* ---- the .tg source beside the kernels */
  var kernelRows = {}, lineRows = [], detail, selected = null;
  var byId = {};
  function kernelsOfLine(f, n) {
    return D.kernels.filter(function (k) {
      return k.lines.some(function (l) { return l[0] === f && l[1] === n; });
    });
  }
  function light(kernels, lines) {
    document.querySelectorAll(".hl").forEach(function (e) { e.classList.remove("hl"); });
    kernels.forEach(function (k) { kernelRows[k.id].classList.add("hl"); });
    lines.forEach(function (l) {
      var r = document.querySelector('.line[data-file="' + l[0] + '"][data-line="' + l[1] + '"]');
      if (r) r.classList.add("hl");
    });
  }
  function showSource(f) {
    lineRows.forEach(function (p, i) { p.style.display = i === f ? "" : "none"; });
  }
  function selectKernel(k, scroll) {
    if (selected !== null) kernelRows[selected].classList.remove("sel");
    selected = k.id;
    kernelRows[k.id].classList.add("sel");
    light([k], k.lines);
    if (k.lines.length) {
      showSource(k.lines[0][0]);
      var r = document.querySelector('.line[data-file="' + k.lines[0][0] + '"][data-line="' + k.lines[0][1] + '"]');
      if (r && scroll) r.scrollIntoView({ block: "center" });
    }
    if (scroll) kernelRows[k.id].scrollIntoView({ block: "nearest" });
    drawDetail(k);
  }

  /* ---- what the passes decided: their findings (passes/findings.h), the
   * data `tgc --report NAME` prints as text: [pass, verdict, node, source,
   * line, col, reason, fields] */
  var F = (D.findings || []).map(function (f) {
    return { pass: f[0], verdict: f[1], node: f[2], file: f[3], line: f[4], col: f[5], reason: f[6], x: f[7] };
  });
  function findings(pass, verdict) {
    return F.filter(function (f) { return f.pass === pass && (!verdict || f.verdict === verdict); });
  }
  /* a finding's .tg place, a link that shows and lights the line */
  function place(f) {
    if (f.file < 0 || !D.sources[f.file]) return "—";
    var text = basename(D.sources[f.file].path) + ":" + f.line + (f.col ? ":" + f.col : "");
    return el("a", { href: "#source", "class": "place", "data-file": f.file, "data-line": f.line, text: text,
      click: function (e) {
        e.preventDefault();
        showSource(f.file);
        light(kernelsOfLine(f.file, f.line), [[f.file, f.line]]);
        var r = document.querySelector('.line[data-file="' + f.file + '"][data-line="' + f.line + '"]');
        if (r) r.scrollIntoView({ block: "center" });
      } });
  }
  function kernelLink(id) {
    if (!byId[id]) return "k" + id;
    return el("a", { href: "#source", text: "k" + id, click: function (e) { e.preventDefault(); selectKernel(byId[id], true); } });
  }
  function node(f) { return f.node >= 0 ? "%" + f.node : "—"; }
  /* a table too long to draw up front: drawn when opened */
  function later(summary, build) {
    var d = el("details", {}, [el("summary", { text: summary })]), built = false;
    d.addEventListener("toggle", function () { if (d.open && !built) { built = true; d.appendChild(build()); } });
    return d;
  }
  function drawDetail(k) {
    detail.textContent = "";
    var ops = Object.keys(k.ops).map(function (o) { return k.ops[o] > 1 ? o + " ×" + k.ops[o] : o; }).join(", ");
    detail.appendChild(el("h3", { text: "k" + k.id + " " + k.name + " (" + k.kind + ", " + k.phase + ")" }));
    detail.appendChild(table(["", ""], [
      ["source", k.where || "—"], ["ops", ops],
      ["bytes", bytes(k.read) + " read, " + bytes(k.written) + " written"], ["FLOPs", si(k.flops)],
      ["roofline", time(k.seconds) + " in " + k.launches + " launch" + (k.launches === 1 ? "" : "es") +
        (k.category ? " (" + k.category + ")" : "")],
      ["reads from", k.from.map(function (f) { return "k" + f; }).join(" ") || "leaves only"],
      ["folded into", k.folded_into >= 0 ? "k" + k.folded_into : "—"]
    ]));
    detail.appendChild(el("h3", { text: "Fusion: the kernel, and why it stopped at its edges" }));
    var own = findings("fuse", "kernel").filter(function (f) { return f.x.kernel === k.id; })[0];
    var stops = findings("fuse", "stop").filter(function (f) { return f.x.kernel === k.id; });
    if (own) detail.appendChild(el("p", { text: "ops by line: " + own.x.ops_by_line }));
    if (stops.length) {
      detail.appendChild(table(["stopped at", "op", "place", "why not in k" + k.id], stops.map(function (f) {
        return [node(f), f.x.op, place(f), f.reason];
      })));
    } else {
      detail.appendChild(el("p", { "class": "muted", text: "No op stopped at its edges." }));
    }
    detail.appendChild(el("h3", { text: "Generated CUDA" }));
    if (!k.units.length) detail.appendChild(el("p", { text: "No function of its own: cuBLASLt, or folded into another kernel." }));
    k.units.forEach(function (u) { detail.appendChild(el("pre", { text: D.cuda[u].code })); });
  }
  function drawSource() {
    var s = section("source", "The .tg source and the kernels its ops became");
    s.appendChild(el("p", { "class": "muted",
      text: "Click a line to light the kernels its ops are in; click a kernel to see its lines, ops, fusion, CUDA and cost." }));
    var tabs = el("div", { "class": "tabs" });
    var src = el("div", { "class": "pane" }), list = el("div", { "class": "pane" });
    detail = el("div", { "class": "pane detail" });
    D.sources.forEach(function (f, fi) {
      tabs.appendChild(el("button", { text: basename(f.path), click: function () { showSource(fi); } }));
      var used = {};
      D.kernels.forEach(function (k) { k.lines.forEach(function (l) { if (l[0] === fi) used[l[1]] = true; }); });
      var pane = el("div");
      f.text.split("\n").forEach(function (t, i) {
        var n = i + 1;
        pane.appendChild(el("div", { "class": "line" + (used[n] ? " has" : ""), "data-file": fi, "data-line": n,
          click: function () { light(kernelsOfLine(fi, n), [[fi, n]]); } },
          [el("span", { "class": "no", text: String(n) }), t]));
      });
      lineRows.push(pane);
      src.appendChild(pane);
    });
    D.kernels.forEach(function (k) {
      byId[k.id] = k;
      var row = el("div", { "class": "kernel", "data-k": k.id, click: function () { selectKernel(k, true); } },
        [el("span", { "class": "k", text: "k" + k.id }), k.name + " ", el("span", { "class": "muted", text: k.where })]);
      kernelRows[k.id] = row;
      list.appendChild(row);
    });
    s.appendChild(tabs);
    s.appendChild(el("div", { "class": "cols" }, [src, list, detail]));
    showSource(0);
  }

  /* ---- the step as a graph of kernels: repeated runs drawn once, ×N
   * (the runs are the compiler's: report.c, kernel_runs) */
  var colors = { matmul: "#4a7fd4", epilogue: "#7fa7e6", attention: "#9b59b6", row: "#e67e22", elementwise: "#27ae60",
                 reduce: "#c0392b", embedding: "#8e6c3a", optimizer: "#7f8c8d" };
  function drawGraph() {
    var s = section("graph", "The step as a graph of kernels");
    var items = D.runs.map(function (r) { return { start: r[0], p: r[1], r: r[2], open: false }; });
    var own = el("div", { "class": "pane own-layout" }), dot = el("div", { "class": "pane dot-layout" });
    function show(which) {
      own.style.display = which === "own" ? "" : "none";
      dot.style.display = which === "dot" ? "" : "none";
    }
    if (D.step_svg) {
      s.appendChild(el("p", { "class": "muted",
        text: "Graphviz's layout of the kernels (dot), a run repeated layer by layer drawn once as ×N; click a kernel to open it, " +
              "a run to open it in the page's own layout." }));
      s.appendChild(el("div", { "class": "tabs" }, [
        el("button", { text: "Graphviz's layout", click: function () { show("dot"); } }),
        el("button", { text: "own layout (runs open and close)", "class": "to-own", click: function () { show("own"); } })]));
      dot.innerHTML = D.step_svg;
      dot.querySelectorAll("g.node").forEach(function (n) {
        var id = n.getAttribute("id") || "", num = +id.slice(1);
        n.classList.add("tile");
        n.addEventListener("click", function () {
          if (id[0] === "k" && byId[num]) selectKernel(byId[num], true);
          else if (id[0] === "g" && items[num]) { items[num].open = true; draw(); show("own"); }
        });
      });
    } else {
      s.appendChild(el("p", { "class": "muted",
        text: "Kernels in run order, top to bottom, coloured by category; an arc joins a kernel to one that reads its output. " +
              "Runs repeated layer by layer are drawn once with ×N: click one to open it. (Graphviz's dot was not found: " +
              "the page's own layout.)" }));
    }
    s.appendChild(dot);
    s.appendChild(own);
    function draw() {
      own.textContent = "";
      var rows = [], rowOf = {};
      items.forEach(function (it) {
        if (it.r > 1 && !it.open) {
          for (var x = 0; x < it.p * it.r; x++) rowOf[D.kernels[it.start + x].id] = rows.length;
          rows.push({ group: it });
        } else {
          for (var y = 0; y < it.p * it.r; y++) { rowOf[D.kernels[it.start + y].id] = rows.length; rows.push({ k: D.kernels[it.start + y], group: it.r > 1 ? it : null }); }
        }
      });
      var H = 18, W = 900, g = svg("svg", { width: W, height: rows.length * H + 10, "class": "step-graph" });
      rows.forEach(function (r, i) {
        var y = 4 + i * H;
        if (r.k) {
          var k = r.k, c = colors[k.category] || "#aab";
          var t = svg("g", { "class": "tile", "data-k": k.id });
          t.appendChild(svg("rect", { x: 200, y: y, width: 360, height: H - 4, rx: 3, fill: c, opacity: 0.85 }));
          t.appendChild(svg("text", { x: 206, y: y + 11, fill: "#fff" }, "k" + k.id + " " + k.name.slice(0, 48)));
          t.appendChild(svg("text", { x: 570, y: y + 11, fill: "#556" }, k.where.slice(0, 50)));
          t.addEventListener("click", function () { selectKernel(k, true); });
          g.appendChild(t);
        } else {
          var it = r.group, first = D.kernels[it.start], last = D.kernels[it.start + it.p - 1];
          var b = svg("g", { "class": "tile group" });
          b.appendChild(svg("rect", { x: 200, y: y, width: 360, height: H - 4, rx: 3, fill: "#fff", stroke: "#334", "stroke-width": 1.5 }));
          b.appendChild(svg("text", { x: 206, y: y + 11 }, "×" + it.r + ": k" + first.id + "–k" + last.id + " (" + it.p + " kernels), repeated; click to open"));
          b.addEventListener("click", function () { it.open = true; draw(); });
          g.appendChild(b);
        }
        if (r.group && r.k && r.k === D.kernels[r.group.start]) {
          var c2 = svg("text", { x: 4, y: y + 11, "class": "tile" }, "▾ ×" + r.group.r + " (close)");
          c2.addEventListener("click", function () { r.group.open = false; draw(); });
          g.appendChild(c2);
        }
      });
      var drawn = {};
      D.kernels.forEach(function (k) {
        k.from.forEach(function (f) {
          var a = rowOf[f], b = rowOf[k.id];
          if (a === undefined || b === undefined || a === b || drawn[a + "," + b]) return;
          drawn[a + "," + b] = true;
          var ya = 4 + a * H + 7, yb = 4 + b * H + 7, bend = Math.min(180, 8 + 6 * Math.abs(b - a));
          g.insertBefore(svg("path", { d: "M200," + ya + " C" + (200 - bend) + "," + ya + " " + (200 - bend) + "," + yb + " 200," + yb,
            fill: "none", stroke: "#889", "stroke-opacity": 0.45 }), g.firstChild);
        });
      });
      own.appendChild(g);
    }
    draw();
    show(D.step_svg ? "dot" : "own");
  }

  /* ---- traffic by category, the roofline, the launches that dominate */
  function drawTraffic() {
    var s = section("traffic", "Traffic and the roofline on " + D.gpu.name);
    var cats = D.categories.filter(function (c) { return c[1] > 0; });
    var max = Math.max.apply(null, cats.map(function (c) { return c[4]; }).concat([1e-12]));
    var W = 960, H = 22, g = svg("svg", { width: W, height: cats.length * H + 24, "class": "categories" });
    cats.forEach(function (c, i) {
      var w = 380 * c[4] / max, y = 4 + i * H;
      g.appendChild(svg("text", { x: 0, y: y + 13 }, c[0]));
      g.appendChild(svg("rect", { x: 90, y: y, width: Math.max(1, w), height: H - 6, fill: colors[c[0]] || "#4a7fd4" }));
      g.appendChild(svg("text", { x: 96 + w, y: y + 13 },
        time(c[4]) + " · " + bytes(c[2]) + " · " + si(c[3]) + "FLOP · " + c[1] + " launches · " +
        (100 * c[4] / D.totals.seconds).toFixed(1) + "%"));
    });
    s.appendChild(el("h3", { text: "Roofline time by category" }));
    s.appendChild(g);
    s.appendChild(el("h3", { text: "The roofline: each launch's arithmetic intensity and the rate it may reach" }));
    s.appendChild(roofline());
    var top = D.launches.map(function (l, i) { return [l, i]; }).sort(function (a, b) { return b[0][7] - a[0][7]; }).slice(0, 20);
    s.appendChild(el("h3", { text: "The launches that dominate the step" }));
    s.appendChild(table(["#", "kernel", "function", "category", "read", "written", "FLOPs", "roofline", "share", "flag"],
      top.map(function (t) {
        var l = t[0], k = byId[l[0]];
        var a = el("a", { href: "#source", text: "k" + l[0] + " " + (k ? k.name : ""), click: function () { if (k) selectKernel(k, true); } });
        return [t[1], a, l[1], l[2], bytes(l[3]), bytes(l[4]), si(l[5]), time(l[6]),
                (100 * l[6] / D.totals.seconds).toFixed(1) + "%", l[8]];
      }), [1, 0, 0, 0, 1, 1, 1, 1, 1, 0]));
  }
  function roofline() {
    var W = 640, H = 300, L = 50, B = 30, g = svg("svg", { width: W, height: H, "class": "roofline" });
    var xs = [-2, 4], ys = [8, 16];
    function X(i) { return L + (Math.log10(i) - xs[0]) / (xs[1] - xs[0]) * (W - L - 10); }
    function Y(f) { return H - B - (Math.log10(f) - ys[0]) / (ys[1] - ys[0]) * (H - B - 10); }
    g.appendChild(svg("rect", { x: L, y: 10, width: W - L - 10, height: H - B - 10, fill: "none", stroke: "#ccd" }));
    [D.gpu.bf16, D.gpu.f32].forEach(function (peak, j) {
      var knee = peak / D.gpu.hbm, pts = [];
      for (var e = xs[0]; e <= xs[1] + 1e-9; e += 0.05) {
        var i = Math.pow(10, e);
        pts.push(X(i) + "," + Y(Math.min(peak, i * D.gpu.hbm)));
      }
      g.appendChild(svg("polyline", { points: pts.join(" "), fill: "none", stroke: j ? "#e67e22" : "#2b6fd6", "stroke-width": 1.5 }));
      g.appendChild(svg("text", { x: X(Math.min(knee * 3, 5000)), y: Y(peak) - 4 }, j ? "f32 " + si(peak) + "FLOP/s" : "bf16 " + si(peak) + "FLOP/s"));
    });
    D.launches.forEach(function (l) {
      var by = l[3] + l[4];
      if (!by || !l[5] || !l[6]) return;
      var i = l[5] / by, f = l[5] / l[6];
      g.appendChild(svg("circle", { cx: X(Math.min(Math.max(i, 1e-2), 1e4)), cy: Y(Math.min(Math.max(f, 1e8), 1e16)), r: 2.5,
        fill: colors[l[2]] || "#555", opacity: 0.7 }));
    });
    for (var e = xs[0]; e <= xs[1]; e++) g.appendChild(svg("text", { x: X(Math.pow(10, e)) - 8, y: H - 12 }, "1e" + e));
    for (var f = ys[0]; f <= ys[1]; f += 2) g.appendChild(svg("text", { x: 4, y: Y(Math.pow(10, f)) + 4 }, "1e" + f));
    g.appendChild(svg("text", { x: W / 2 - 80, y: H - 1 }, "FLOPs per byte (log)"));
    return g;
  }

  /* ---- memory: live bytes over the step, the peak, what is alive at it */
  function drawMemory() {
    var s = section("memory", "Memory plan: live bytes over the step");
    var n = D.kernels.length, live = [];
    for (var i = 0; i <= n; i++) live.push(0);
    D.buffers.forEach(function (b) { for (var k = b[1]; k <= Math.min(b[2], n); k++) live[k] += b[3]; });
    var peak = 0;
    live.forEach(function (v, i) { if (v > live[peak]) peak = i; });
    var W = 900, H = 220, max = live[peak] || 1, g = svg("svg", { width: W, height: H + 20, "class": "live-bytes" });
    function X(i) { return 40 + i / Math.max(1, n) * (W - 50); }
    function Y(v) { return H - v / max * (H - 20); }
    var pts = ["40," + H];
    live.forEach(function (v, i) { pts.push(X(i) + "," + Y(v), X(i + 1) + "," + Y(v)); });
    pts.push(X(n + 1) + "," + H);
    g.appendChild(svg("polygon", { points: pts.join(" "), fill: "#4a7fd4", opacity: 0.6 }));
    g.appendChild(svg("line", { x1: X(peak), x2: X(peak), y1: 10, y2: H, stroke: "#d33" }));
    g.appendChild(svg("text", { x: X(peak) + 4, y: 16 }, "peak " + bytes(live[peak]) + " at k" + peak));
    g.appendChild(svg("text", { x: 40, y: H + 14 }, "kernel 0 … " + n + " (run order); the arena the plan places is " + bytes(D.memory.arena)));
    s.appendChild(g);
    var alive = D.buffers.filter(function (b) { return b[1] <= peak && peak <= b[2]; }).sort(function (a, b) { return b[3] - a[3]; });
    s.appendChild(el("h3", { text: alive.length + " buffers alive at the peak (k" + peak + "), largest first" }));
    s.appendChild(table(["value", "bytes", "written by", "last read by"], alive.slice(0, 40).map(function (b) {
      return [b[4], bytes(b[3]), "k" + b[1], b[2] >= n ? "after the step" : "k" + b[2]];
    }), [0, 1, 0, 0]));
  }

  /* ---- the collectives on the timeline of kernels */
  function drawCollectives() {
    var s = section("collectives", "Collectives on the timeline of kernels");
    var start = {}, t = 0;
    D.kernels.forEach(function (k) { start[k.id] = t; t += k.seconds; });
    var total = t || 1, W = 900, g = svg("svg", { width: W, height: 90, "class": "timeline" });
    function X(v) { return 80 + v / total * (W - 90); }
    g.appendChild(svg("text", { x: 0, y: 24 }, "kernels"));
    g.appendChild(svg("text", { x: 0, y: 64 }, "all-reduce"));
    D.kernels.forEach(function (k) {
      g.appendChild(svg("rect", { x: X(start[k.id]), y: 12, width: Math.max(0.5, X(start[k.id] + k.seconds) - X(start[k.id])), height: 18,
        fill: k.phase === "forward" ? "#27ae60" : k.phase === "backward" ? "#4a7fd4" : "#7f8c8d" }));
    });
    var rows = D.buckets.map(function (b, i) {
      var at = start[b[0]] + (byId[b[0]] ? byId[b[0]].seconds : 0), opt = total;
      D.kernels.forEach(function (k) { if (k.phase === "optimizer" && start[k.id] < opt) opt = start[k.id]; });
      g.appendChild(svg("rect", { x: X(at), y: 52, width: Math.max(2, X(opt) - X(at)), height: 16, fill: "#e67e22", opacity: 0.35 }));
      g.appendChild(svg("line", { x1: X(at), x2: X(at), y1: 48, y2: 72, stroke: "#e67e22", "stroke-width": 2 }));
      return [i, "after k" + b[0], b[2], bytes(b[1]), time(Math.max(0, opt - at))];
    });
    s.appendChild(el("p", { "class": "muted",
      text: "Width is roofline time. Green: forward, blue: backward, grey: optimizer. Each all-reduce bucket starts when its last " +
            "gradient is made and may overlap the compute until the optimizer, which needs it (orange)." }));
    var zero = (D.collectives || []).map(function (c, i) {
      var at = start[c[0]] || 0, until = c[4] >= 0 && start[c[4]] !== undefined ? start[c[4]] : total;
      g.appendChild(svg("rect", { x: X(at), y: 76, width: Math.max(2, X(until) - X(at)), height: 10,
        fill: c[1] === "all_gather" ? "#27ae60" : "#c0392b", opacity: 0.4 }));
      return [i, c[1], "k" + c[0], c[3], bytes(c[2]), c[4] >= 0 ? "k" + c[4] : "after the step", time(Math.max(0, until - at))];
    });
    if (zero.length) { g.setAttribute("height", 100); g.appendChild(svg("text", { x: 0, y: 85 }, "in the graph")); }
    s.appendChild(g);
    if (!rows.length) s.appendChild(el("p", { text: "No all-reduce buckets: no gradient to reduce." }));
    else s.appendChild(table(["bucket", "starts", "gradients", "bytes", "compute it can overlap"], rows, [1, 0, 1, 1, 1]));
    if (zero.length) {
      s.appendChild(el("h3", { text: zero.length + " collectives in the graph (ZeRO stage 3's all-gathers and reduce-scatters, " +
                                     "tensor parallelism's all-reduces): each from its point until the first kernel that reads it" }));
      s.appendChild(table(["#", "collective", "at", "ranks", "bytes a rank sends", "needed by", "compute it can overlap"], zero,
                          [1, 0, 0, 1, 1, 0, 1]));
    }
  }

  /* ---- each pass's report, from its findings */
  var REPORTS = [["fuse", "fusion"], ["memplan", "memplan"], ["schedule", "schedule"], ["precision", "precision"],
                 ["shard_tensor", "sharding"], ["flash_attn", "flash_attn"], ["gelu", "gelu"]];
  function reportSection(pass, name, title) {
    var s = section("report-" + name, title);
    s.setAttribute("data-pass", pass);
    s.appendChild(el("p", { "class": "muted", text: "The same findings as text: tgc " + D.model + " --report " + name }));
    return s;
  }
  function totals(f) {
    return "peak " + bytes(f.x.peak_bytes) + " (intermediates, planned), " + bytes(f.x.unreused_bytes) +
      " without reuse; parameters and state " + bytes(f.x.persistent_bytes);
  }
  function drawFusionReport(s) {
    var sum = findings("fuse", "summary")[0], stops = findings("fuse", "stop");
    if (sum) {
      s.appendChild(table(["", ""], [["kernels", sum.x.kernels + " (" + sum.x.matmuls + " matmuls) for " + sum.x.ops + " ops"],
        ["bytes moved", bytes(sum.x.bytes_fused) + " fused, " + bytes(sum.x.bytes_unfused) + " unfused (" +
          (sum.x.bytes_fused ? (sum.x.bytes_unfused / sum.x.bytes_fused).toFixed(1) : "0.0") + "× less)"],
        ["memory", totals(sum)], ["stops", String(sum.x.stops)]]));
    }
    var why = {};
    stops.forEach(function (f) { why[f.reason] = (why[f.reason] || 0) + 1; });
    var reasons = Object.keys(why).sort(function (a, b) { return why[b] - why[a]; });
    s.appendChild(el("h3", { text: "Why fusion stopped, by reason" }));
    s.appendChild(table(["stops", "reason"], reasons.map(function (r) { return [why[r], r]; }), [1, 0]));
    s.appendChild(later("every stop (" + stops.length + "): the op, its place, the kernel it is not in, why", function () {
      return table(["node", "op", "place", "not in", "why"], stops.map(function (f) {
        return [node(f), f.x.op, place(f), kernelLink(f.x.kernel), f.reason];
      }));
    }));
  }
  function bufferName(f) {
    return node(f) + " " + f.x.op + (f.x.name ? " \"" + f.x.name + "\"" : "") + (f.x.into ? " into \"" + f.x.into + "\"" : "");
  }
  function bufferRow(f) {
    return [bufferName(f), bytes(f.x.bytes), "0x" + f.x.offset.toString(16), "k" + f.x.first + "..", f.x.last < 0 ? "end" : "k" + f.x.last,
            place(f)];
  }
  function drawMemplanReport(s) {
    var sum = findings("memplan", "summary")[0], bufs = findings("memplan", "buffer");
    if (sum) s.appendChild(table(["", ""], [["buffers", String(sum.x.buffers)],
      ["live at once", "at most " + bytes(sum.x.live_bytes) + " (no plan needs less)"], ["memory", totals(sum)]]));
    var head = ["value", "bytes", "offset", "live from", "to", "place"], num = [0, 1, 1, 0, 0, 0];
    var largest = bufs.slice().sort(function (a, b) { return b.x.bytes - a.x.bytes; }).slice(0, 10);
    s.appendChild(el("h3", { text: "The " + largest.length + " largest buffers" }));
    s.appendChild(table(head, largest.map(bufferRow), num));
    s.appendChild(later("every buffer (" + bufs.length + "), in order of its node", function () {
      return table(head, bufs.map(bufferRow), num);
    }));
  }
  function drawScheduleReport(s) {
    var sum = findings("schedule", "summary")[0], grads = findings("schedule", "gradient");
    if (sum) s.appendChild(el("p", { text: sum.x.buckets + " bucket" + (sum.x.buckets === 1 ? "" : "s") + " of up to " +
      bytes(sum.x.bucket_bytes) + " over " + sum.x.kernels + " kernels; each all-reduced right after the kernel that makes its last gradient" }));
    s.appendChild(table(["bucket", "gradients", "bytes", "all-reduced after", "the parameters' gradients"],
      findings("schedule", "bucket").map(function (b) {
        var of = grads.filter(function (g) { return g.x.bucket === b.x.bucket; });
        return [b.x.bucket, b.x.gradients, bytes(b.x.bytes), el("span", {}, [kernelLink(b.x.after_kernel), " " + b.x.kernel_name]),
                of.map(function (g) { return (g.x.param || "") + " (" + node(g) + ")"; }).join(", ")];
      }), [1, 1, 1, 0, 0]));
    var coll = findings("schedule", "collective");
    if (coll.length) {
      s.appendChild(el("h3", { text: "The tensor axis's collectives, in run order (over " + coll[0].x.ranks + " ranks)" }));
      s.appendChild(table(["kernel", "phase", "op", "values", "bytes a rank sends", "place"], coll.map(function (f) {
        return [kernelLink(f.x.kernel), f.x.phase, f.x.op, f.x.numel + " " + f.x.dtype, bytes(f.x.sent), place(f)];
      }), [0, 0, 0, 1, 1, 0]));
    }
  }
  function drawPrecisionReport(s) {
    var same = findings("precision", "unchanged")[0];
    if (same) { s.appendChild(el("p", { text: same.x.policy + ": " + same.reason })); return; }
    s.appendChild(el("h3", { text: "bf16: the rules, and how many values each chose" }));
    s.appendChild(table(["rule", "values", "why"], findings("precision", "rule").map(function (f) {
      return [f.x.rule, f.x.values, f.reason];
    }), [0, 1, 0]));
    var vals = findings("precision", "value");
    s.appendChild(later("every value (" + vals.length + "): its dtype and the rule that chose it", function () {
      return table(["node", "op", "type", "rule", "place"], vals.map(function (f) {
        return [node(f), f.x.op, f.x.type, f.x.rule, place(f)];
      }));
    }));
  }
  function drawShardingReport(s) {
    var axis = findings("shard_tensor", "axis")[0], sum = findings("shard_tensor", "summary")[0];
    s.appendChild(el("p", { text: "A tensor axis of " + axis.x.ranks + " ranks; rank " + axis.x.rank + "'s graph. " +
      (sum ? sum.x.collectives + " collectives in the forward, " + bytes(sum.x.bytes) + " sent per rank; the backward all-reduces the gradient of " +
             sum.x.replicated + " replicated values entering split computations." : "") }));
    var rows = F.filter(function (f) { return f.pass === "shard_tensor" && /^(param|value|collective)$/.test(f.verdict); });
    s.appendChild(table(["", "op", "name", "layout", "axis", "bytes a rank sends", "place"], rows.map(function (f) {
      if (f.verdict === "param")
        return ["split parameter", "param", f.x.name, f.x.split + (f.x.groups > 1 ? "/" + f.x.groups : "") + ": [" + f.x.part + "] of " + f.x.whole,
                f.x.axis, "", place(f)];
      if (f.verdict === "value") return ["split value", f.x.op, f.x.name || "", f.x.type + (f.x.groups > 1 ? " in groups" : ""), f.x.axis, "", place(f)];
      return ["collective", f.x.op, "", "f32[" + f.x.numel + "]", "", bytes(f.x.sent), place(f)];
    }), [0, 0, 0, 0, 1, 1, 0]));
  }
  function drawMatchesReport(s, pass) {
    var rows = F.filter(function (f) { return f.pass === pass && f.verdict !== "summary"; });
    var sum = findings(pass, "summary")[0];
    if (sum) s.appendChild(el("p", { text: sum.x.replaced + " replaced" }));
    s.appendChild(table(["", "node", "place", "what"], rows.map(function (f) {
      var what = f.reason || (pass === "gelu" ? "%" + f.node + " = gelu(%" + f.x.input + ")"
                                              : "q " + f.x.q_type + ", scale " + f.x.scale + (f.x.q_from ? ", q from " + f.x.q_from : ""));
      return [f.verdict.replace("_", " "), node(f), place(f), what];
    })));
  }
  function drawReports() {
    var s = section("reports", "Reports: what each pass decided");
    s.appendChild(el("p", { "class": "muted", text: "Each pass records its decisions as findings (pass, verdict, node, .tg place, " +
      "reason, numbers); the sections below draw them, and tgc --report NAME prints the same findings as text." }));
    var drawn = [];
    REPORTS.forEach(function (r) {
      var of = findings(r[0]);
      if (!of.length || (r[0] === "shard_tensor" && !findings(r[0], "axis").length)) return;
      drawn.push([r[1], r[0], of.length, el("a", { href: "#report-" + r[1], text: "#report-" + r[1] })]);
    });
    s.appendChild(table(["report", "pass", "findings", "section"], drawn, [0, 0, 1, 0]));
    var draw = { fuse: drawFusionReport, memplan: drawMemplanReport, schedule: drawScheduleReport,
                 precision: drawPrecisionReport, shard_tensor: drawShardingReport };
    var titles = { fuse: "Fusion: the kernels' totals, and every place fusion stopped",
                   memplan: "Memory plan: every buffer, its bytes, offset and lifetime",
                   schedule: "Schedule: the all-reduce buckets of the gradients",
                   precision: "Precision: each value's dtype and the rule that chose it",
                   shard_tensor: "Sharding: tensor parallelism's split parameters, values and collectives",
                   flash_attn: "flash_attn: each causal attention matched, or why not",
                   gelu: "gelu: each GELU matched" };
    drawn.forEach(function (d) {
      var t = reportSection(d[1], d[0], titles[d[1]]);
      if (draw[d[1]]) draw[d[1]](t);
      else drawMatchesReport(t, d[1]);
    });
    var p0 = section("prelude", "The CUDA prelude");
    p0.appendChild(el("details", {}, [el("summary", { text: "the CUDA prelude every function compiles after" }),
                                      el("pre", { text: D.prelude || "" })]));
  }

  /* ---- a run (tgrun's out_dir/report.html): curves, samples, config */
  function chart(title, series) {
    var W = 440, H = 220, L = 56, B = 28, pts = [];
    series.forEach(function (s) { pts = pts.concat(s.pts); });
    var g = svg("svg", { width: W, height: H, "class": "chart" });
    g.appendChild(svg("text", { x: L, y: 12 }, title));
    if (!pts.length) { g.appendChild(svg("text", { x: L, y: H / 2 }, "no points yet")); return g; }
    var x0 = Math.min.apply(null, pts.map(function (p) { return p[0]; })), x1 = Math.max.apply(null, pts.map(function (p) { return p[0]; }));
    var y0 = Math.min.apply(null, pts.map(function (p) { return p[1]; })), y1 = Math.max.apply(null, pts.map(function (p) { return p[1]; }));
    if (x1 === x0) x1 = x0 + 1;
    if (y1 === y0) y1 = y0 + 1;
    function X(v) { return L + (v - x0) / (x1 - x0) * (W - L - 10); }
    function Y(v) { return H - B - (v - y0) / (y1 - y0) * (H - B - 20); }
    g.appendChild(svg("rect", { x: L, y: 20, width: W - L - 10, height: H - B - 20, fill: "none", stroke: "#ccd" }));
    g.appendChild(svg("text", { x: 2, y: Y(y1) + 4 }, y1.toPrecision(4)));
    g.appendChild(svg("text", { x: 2, y: Y(y0) + 4 }, y0.toPrecision(4)));
    g.appendChild(svg("text", { x: L, y: H - 10 }, "step " + x0));
    g.appendChild(svg("text", { x: W - 80, y: H - 10 }, "step " + x1));
    series.forEach(function (s, i) {
      g.appendChild(svg("polyline", { points: s.pts.map(function (p) { return X(p[0]) + "," + Y(p[1]); }).join(" "),
        fill: "none", stroke: s.color, "stroke-width": 1.5, "class": "series-" + s.name }));
      g.appendChild(svg("text", { x: W - 120, y: 34 + 14 * i, fill: s.color }, s.name));
    });
    return g;
  }
  function drawRun() {
    var R = D.run, rows = [];
    R.metrics.split("\n").forEach(function (l) {
      if (!l.trim()) return;
      try { rows.push(JSON.parse(l)); } catch (e) { /* the line being written: left for the next update */ }
    });
    function series(key, from) {
      return from.filter(function (r) { return typeof r[key] === "number"; }).map(function (r) { return [r.step, r[key]]; });
    }
    var steps = rows.filter(function (r) { return "loss" in r; }), evals = rows.filter(function (r) { return "val_loss" in r; });
    link("run", "run"); link("curves", "curves"); link("samples", "samples"); link("config", "config");
    var s = section("run", "The run");
    var last = steps[steps.length - 1], val = evals[evals.length - 1];
    s.appendChild(table(["", ""], [["model", D.model], ["out_dir", R.out_dir],
      ["steps", steps.length ? last.step + " (" + steps.length + " rows)" : "none yet"],
      ["train loss", last ? String(last.loss) : "—"], ["val loss", val ? val.val_loss + " at step " + val.step : "—"],
      ["the compiler's page", "tgc " + D.model + " --report html -o DIR (with the run's -D and precision)"]]));
    var c = section("curves", "Curves against step");
    var box = el("div", { "class": "cols" });
    box.appendChild(chart("loss", [{ name: "train", pts: series("loss", steps), color: "#2b6fd6" },
                                   { name: "val", pts: series("val_loss", evals), color: "#e67e22" }]));
    box.appendChild(chart("learning rate", [{ name: "lr", pts: series("lr", steps), color: "#27ae60" }]));
    c.appendChild(box);
    var box2 = el("div", { "class": "cols" });
    box2.appendChild(chart("gradient norm", [{ name: "grad_norm", pts: series("grad_norm", steps), color: "#9b59b6" }]));
    box2.appendChild(chart("tokens/s", [{ name: "tok_per_s", pts: series("tok_per_s", steps), color: "#c0392b" }]));
    c.appendChild(box2);
    section("samples", "Samples").appendChild(el("pre", { text: R.samples || "(no samples yet)" }));
    section("config", "The run's train.cfg").appendChild(el("pre", { text: R.config || "" }));
  }

  if (D.run) {
    drawRun();
  } else if (D.error !== null) {
    drawError();
    drawPipeline();
  } else {
    drawSummary();
    drawPipeline();
    drawSource();
    drawGraph();
    drawTraffic();
    drawMemory();
    drawCollectives();
    drawReports();
  }
  document.body.setAttribute("data-ready", "1");
})();
