// kyai view / kyai report: renders the data block (kyai.view.payload) with DOM text nodes
// only (answers are untrusted model output: never innerHTML) and Plotly's charts.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("kyai-data").textContent);
  const runs = new Map(data.runs.map((run) => [run.id, run]));
  const SHOWN = 200; // questions rendered at once; the search narrows the rest

  // -- small helpers ---------------------------------------------------------------------------
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = String(value);
      else if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }
  const fixed = (value, digits) =>
    value === null || value === undefined ? "-" : Number(value).toFixed(digits);
  const points = (value) =>
    value === null || value === undefined ? "-" : (value * 100 >= 0 ? "+" : "") + (value * 100).toFixed(1);
  const pValue = (value) =>
    value === null || value === undefined ? "-" : value < 0.001 ? value.toExponential(1) : value.toFixed(3);
  const interval = (iv) =>
    iv ? `${fixed(iv.low, 4)} to ${fixed(iv.high, 4)} (${Math.round(iv.confidence * 100)} %, ${iv.method})` : "-";
  const span = (iv) => (iv ? `${fixed(iv.low, 4)}–${fixed(iv.high, 4)} ${iv.method}` : "-");
  const shortKey = (key) => (key || "").slice(0, 16);
  function table(columns, rows, attrs) {
    return el("table", attrs || {},
      el("thead", {}, el("tr", {}, columns.map((c) => el("th", { text: c })))),
      el("tbody", {}, rows.map((row) => el("tr", {}, row.map((cell) =>
        cell instanceof Node ? el("td", {}, cell) : el("td", { text: cell }))))));
  }
  function section(id, title, ...children) {
    return el("section", { id }, el("h2", { text: title }), ...children);
  }
  // Plotly's toolbar (its modebar: top right, shown on hover, about 25 px high) lies over the
  // figure's top margin: every chart's top margin holds it, so it never covers data.
  const MODEBAR_ROOM = 36;
  function plot(node, traces, layout) {
    const base = { margin: { l: 10, r: 20, t: MODEBAR_ROOM, b: 45 }, font: { size: 12 },
      showlegend: true, legend: { orientation: "h", y: -0.25 }, paper_bgcolor: "#fff",
      plot_bgcolor: "#fafafa" };
    const merged = Object.assign(base, layout);
    merged.margin = Object.assign({}, merged.margin,
      { t: Math.max(merged.margin.t || 0, MODEBAR_ROOM) });
    window.Plotly.newPlot(node, traces, merged, { displaylogo: false, responsive: true });
  }
  function matches(texts, query) {
    if (!query) return true;
    const needle = query.toLowerCase();
    return texts.some((text) => text && String(text).toLowerCase().includes(needle));
  }
  const questionTexts = (q) => [q.id, q.question, q.truth, q.answer, q.reasoning, q.judgement,
    q.reply, q.error];

  // -- header and notices ----------------------------------------------------------------------
  function header() {
    return el("header", {},
      el("h1", { text: `KYAI results: ${data.title}` }),
      el("p", { class: "small", text: `${data.runs.length} run(s); generated ${data.generated_at} by kyai ${data.kyai_version}` }),
      el("nav", {}, [["#runs", "Runs"], ["#forest", "Scores and ranks"], ["#compare", "Two runs"],
        ...(data.sweep ? [["#sweep", "Sweep"]] : []), ["#questions", "Questions"]]
        .map(([href, text]) => el("a", { href, text }))));
  }
  function notices() {
    if (!data.notices.length) return null;
    return el("section", { id: "notices", role: "alert" },
      el("h2", { text: `Not shown (${data.notices.length})` }),
      el("ul", {}, data.notices.map((n) => el("li", { class: "notice" },
        n.run ? el("strong", { text: n.run }) : null, n.run ? ": " : "", n.message))));
  }

  // -- every run -------------------------------------------------------------------------------
  function errorsCell(run) {
    const kinds = Object.entries(run.errors);
    if (!kinds.length) return "none";
    return el("ul", { class: "plain" }, kinds.map(([kind, count]) => el("li", { text: `${kind}: ${count}` })));
  }
  function runsSection() {
    const columns = ["Run", "Source", "Model", "Comparison key", "Dataset", "Score", "95 % interval",
      "Rank", "Errors", "Errors by kind", "TTFT p50 ms", "TTFT p90 ms", "TPOT p50 ms",
      "ITL p50 ms (client)", "ITL p50 ms (engine)", "E2E p50 ms", "Output tok/s", "Requests/s",
      "Concurrency"];
    const rows = data.runs.map((run) => [
      el("span", { class: "run", text: run.label }), run.source, run.model || "-",
      el("code", { title: run.comparison_key, text: shortKey(run.comparison_key) }), run.dataset || "-",
      el("span", { class: "score", "data-run": run.id, text: fixed(run.avg_score, 4) }),
      span(run.interval),
      run.rank === null ? el("span", { title: run.rank_unavailable || "", text: "n/a" }) : String(run.rank),
      `${run.error_count}${run.questions === null ? "" : "/" + run.questions}`, errorsCell(run),
      fixed(run.serving.ttft_p50_ms, 1), fixed(run.serving.ttft_p90_ms, 1), fixed(run.serving.tpot_p50_ms, 2),
      fixed(run.serving.itl_p50_ms, 3), fixed(run.serving.server_itl_p50_ms, 3),
      fixed(run.serving.e2e_p50_ms, 1), fixed(run.serving.output_tokens_per_second, 1),
      fixed(run.serving.requests_per_second, 2),
      run.serving.concurrency === undefined ? "-" : String(run.serving.concurrency)]);
    return section("runs", "Runs", table(columns, rows, { id: "runs-table" }));
  }

  // -- forest plots ----------------------------------------------------------------------------
  function forestSection() {
    const parts = data.boards.map((board, index) => {
      const chart = el("div", { class: "chart", id: `forest-${index}` });
      const block = el("div", { class: "board" },
        el("h3", {}, "Comparison key ", el("code", { text: board.comparison_key }),
          ` (dataset ${board.dataset || "-"}, ${board.runs.length} run(s))`),
        chart,
        table(board.columns, board.rows, { class: "board-table" }),
        board.footer.map((line) => el("p", { class: "small", text: line })));
      return [block, () => forest(chart, board)];
    });
    const node = section("forest", "Scores and ranks, by comparison key",
      el("p", { class: "small", text: "Each run's score and its 95 % interval; the rank is the leaderboard's (kyai leaderboard): runs no test separates share a rank. Runs with different comparison keys are never ranked against each other." }),
      parts.map(([block]) => block));
    return [node, parts.map(([, draw]) => draw)];
  }
  function forest(node, board) {
    const members = board.runs.map((id) => runs.get(id));
    const labels = members.map((run) => `${run.rank === null ? "n/a" : "#" + run.rank}  ${run.label}`);
    const x = members.map((run) => run.avg_score);
    const hi = members.map((run) => (run.interval ? run.interval.high - run.avg_score : 0));
    const lo = members.map((run) => (run.interval ? run.avg_score - run.interval.low : 0));
    plot(node, [{
      type: "scatter", mode: "markers", name: "score (95 % interval)", x, y: labels,
      error_x: { type: "data", symmetric: false, array: hi, arrayminus: lo, thickness: 2, width: 6 },
      marker: { size: 10, color: members.map((run) => (run.rank === 1 ? "#1b7f3b" : "#2f5d9e")) },
      text: members.map((run) => `${run.label}: ${fixed(run.avg_score, 4)}, ${interval(run.interval)}`),
      hoverinfo: "text",
    }], {
      height: 100 + MODEBAR_ROOM + 34 * members.length,
      margin: { l: 240, r: 20, t: MODEBAR_ROOM, b: 45 },
      xaxis: { title: { text: "score" }, range: [0, 1.02], zeroline: false },
      yaxis: { autorange: "reversed", automargin: true },
      showlegend: false,
    });
  }

  // -- two runs side by side -------------------------------------------------------------------
  function compareSection() {
    const keys = data.boards.filter((board) =>
      board.runs.filter((id) => runs.get(id).has_scores).length >= 2);
    if (!keys.length) {
      return section("compare", "Two runs side by side",
        el("p", { id: "pair-none", text: "No two runs with per-question scores share a comparison key: there is no pair to compare." }));
    }
    const keySelect = el("select", { id: "pair-key" },
      keys.map((board) => el("option", { value: board.comparison_key, text: `${shortKey(board.comparison_key)} (${board.dataset || "-"})` })));
    const baseSelect = el("select", { id: "pair-baseline" });
    const candSelect = el("select", { id: "pair-candidate" });
    const search = el("input", { id: "pair-search", type: "search", placeholder: "search the discordant questions" });
    const panel = el("div", { id: "pair-panel" });
    const ordered = (board) => board.runs.filter((id) => runs.get(id).has_scores)
      .sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)));
    function fill(select, ids, chosen) {
      select.replaceChildren(...ids.map((id) => el("option", { value: id, text: runs.get(id).label })));
      select.value = chosen;
    }
    function onKey() {
      const board = keys.find((b) => b.comparison_key === keySelect.value);
      const ids = ordered(board);
      // A sweep's baseline cell is the baseline here too (its DELTA is cell - baseline).
      const base = ids.includes(board.baseline) ? board.baseline : ids[0];
      fill(baseSelect, ids, base);
      fill(candSelect, ids, ids.find((id) => id !== base));
      show();
    }
    function show() {
      const found = data.pairs.find((p) => p.baseline === baseSelect.value && p.candidate === candSelect.value);
      panel.replaceChildren(...pairPanel(found, baseSelect.value, candSelect.value, search.value));
    }
    keySelect.addEventListener("change", onKey);
    baseSelect.addEventListener("change", show);
    candSelect.addEventListener("change", show);
    search.addEventListener("input", show);
    const swap = el("button", { id: "pair-swap", type: "button", text: "swap", onclick: () => {
      const base = baseSelect.value; baseSelect.value = candSelect.value; candSelect.value = base; show();
    } });
    const node = section("compare", "Two runs side by side",
      el("p", { class: "small", text: "The paired comparison kyai compare BASELINE CANDIDATE makes (the same figures), and the questions the two runs scored differently." }),
      el("div", { class: "controls" },
        el("label", {}, "comparison key ", keySelect), el("label", {}, "baseline ", baseSelect),
        el("label", {}, "candidate ", candSelect), swap,
        el("label", {}, "search ", search)),
      panel);
    onKey();
    return node;
  }
  function pairPanel(pair, baseId, candId, query) {
    const base = runs.get(baseId), cand = runs.get(candId);
    if (baseId === candId) return [el("p", { class: "notice", text: "Choose two different runs." })];
    if (!pair) return [el("p", { class: "notice", text: `No comparison of ${base.label} and ${cand.label}.` })];
    if (pair.refused) return [el("p", { class: "notice", id: "pair-refused", text: `kyai compare refuses this pair: ${pair.refused}` })];
    const c = pair.comparison;
    const out = [el("p", { id: "pair-sentence", class: "sentence", text: pair.sentence })];
    if (pair.same_run) out.push(el("p", { class: "notice", text: `One run under two names: ${pair.same_run}` }));
    const tests = { "mcnemar-exact": "McNemar exact", "paired-t": "paired t" };
    const methods = { "bonett-price": "Bonett-Price", t: "t" };
    const level = `${Math.round(c.confidence * 100)} %`;
    const rows = [
      ["", "baseline", "candidate"],
      ["run", base.label, cand.label],
      ["model", base.model || "-", cand.model || "-"],
      ["avg score", fixed(base.avg_score, 4), fixed(cand.avg_score, 4)],
      ["score interval", interval(base.interval), interval(cand.interval)],
    ];
    const tables = el("div", { class: "pair-tables" }, table(rows[0], rows.slice(1), { id: "pair-runs" }));
    out.push(tables);
    const figures = [
      ["difference", `${points(c.mean_difference)} points (candidate - baseline) on ${c.n} paired questions`],
      ["difference interval", c.interval ? `${points(c.interval.low)} to ${points(c.interval.high)} points (${level}, ${methods[c.interval_method]})` : `not estimable: ${c.not_estimable}`],
      ["standard error", c.standard_error === null ? "-" : `${(c.standard_error * 100).toFixed(1)} points`],
      ["test", c.p_value === null ? `${tests[c.test]}: no p-value, no verdict` : `${tests[c.test]}: p = ${pValue(c.p_value)}, ${c.significant ? "significant" : "not significant"} at α = ${c.alpha}`],
      ["minimum detectable effect", c.minimum_detectable_effect === null ? "-" : `${(c.minimum_detectable_effect * 100).toFixed(1)} points with ${Math.round(c.power * 100)} % power`],
      ["verdict", c.verdict || "none"],
    ];
    tables.appendChild(el("table", { id: "pair-figures", class: "figures" }, el("tbody", {},
      figures.map(([name, value]) => el("tr", {}, el("th", { text: name }), el("td", { "data-figure": name, text: value }))))));
    const count = pair.discordant.length;
    const split = c.discordant ? ` (${c.discordant.baseline_only} right only in the baseline, ${c.discordant.candidate_only} only in the candidate)` : "";
    out.push(el("h3", {}, el("span", { id: "pair-discordant-count", text: String(count) }),
      c.discordant ? " discordant questions" : " questions scored differently", split));
    const baseQ = data.questions[baseId], candQ = data.questions[candId];
    if (!baseQ || !candQ) {
      const missing = [baseQ ? null : base.label, candQ ? null : cand.label].filter(Boolean).join(" and ");
      out.push(el("p", { class: "notice", text: `The questions of ${missing} are not reachable (see "Not shown" above): only their row numbers and scores are listed.` }));
    }
    const byIndex = (list) => new Map((list || []).map((q) => [q.i, q]));
    const bq = byIndex(baseQ), cq = byIndex(candQ);
    const items = pair.discordant.map((index, k) => ({ index, b: bq.get(index), c: cq.get(index),
      bs: pair.baseline_scores[k], cs: pair.candidate_scores[k] }));
    const shown = items.filter((item) => matches([...questionTexts(item.b || {}), ...questionTexts(item.c || {})], query));
    out.push(el("p", { class: "small", id: "pair-shown", text: query ? `${shown.length} of ${count} match "${query}"` : `${count} listed` }));
    out.push(el("div", { id: "pair-list" }, shown.slice(0, SHOWN).map((item) => pairCard(item, base, cand))));
    if (shown.length > SHOWN) out.push(el("p", { class: "small", text: `showing ${SHOWN} of ${shown.length}: search to narrow` }));
    return out;
  }
  function pairCard(item, base, cand) {
    const q = item.b || item.c || {};
    return el("article", { class: "q pair" },
      el("header", {}, `#${item.index}`, q.id ? ` · ${q.id}` : ""),
      el("div", { class: "sides" }, field("Question", q.question), field("Ground truth", q.truth)),
      el("div", { class: "sides" },
        side(base.label, "baseline", item.b, item.bs), side(cand.label, "candidate", item.c, item.cs)));
  }
  function side(label, role, q, score) {
    return el("div", { class: "side" },
      el("h4", {}, `${role}: `, el("span", { text: label }), " ", scoreBadge(score)),
      answerParts(q || {}));
  }

  // -- questions -------------------------------------------------------------------------------
  function field(name, text) {
    if (text === null || text === undefined) return el("div", { class: "field missing" }, el("h5", { text: name }), el("span", { text: "not available" }));
    return el("div", { class: "field" }, el("h5", { text: name }), el("pre", { text }));
  }
  function scoreBadge(score) {
    if (score === null || score === undefined) return el("span", { class: "badge", text: "no score" });
    const kind = score >= 1 ? "good" : score <= 0 ? "bad" : "mid";
    return el("span", { class: `badge ${kind}`, text: `score ${score}` });
  }
  function answerParts(q) {
    const parts = [field("Answer", q.answered === false ? null : q.answer)];
    if (q.reasoning) parts.push(el("details", {}, el("summary", { text: "Reasoning" }), el("pre", { text: q.reasoning })));
    const judged = q.judgement || q.reply;
    parts.push(field(q.judgement ? "Judgement" : "Judge's reply", judged === undefined ? null : judged));
    if (q.error) parts.push(el("p", { class: "error" }, el("strong", { text: "error " }), el("span", { text: q.error })));
    return parts;
  }
  function questionCard(q) {
    return el("article", { class: "q" },
      el("header", {}, `#${q.i}`, q.id ? ` · ${q.id} ` : " ", scoreBadge(q.score)),
      el("div", { class: "sides" },
        el("div", {}, field("Question", q.question), field("Ground truth", q.truth)),
        el("div", {}, answerParts(q))));
  }
  function questionsSection() {
    const withFiles = data.runs.filter((run) => data.questions[run.id]);
    if (!withFiles.length) {
      return section("questions", "Questions", el("p", { class: "notice", id: "q-none", text: "No run's questions are reachable (see \"Not shown\" above)." }));
    }
    const runSelect = el("select", { id: "q-run" }, withFiles.map((run) => el("option", { value: run.id, text: run.label })));
    const search = el("input", { id: "q-search", type: "search", placeholder: "search question, answer, reasoning, judgement, error" });
    const filter = el("select", { id: "q-filter" }, [["all", "all"], ["error", "with an error"], ["below", "score below 1"], ["zero", "score 0"]]
      .map(([value, text]) => el("option", { value, text })));
    const count = el("p", { class: "small", id: "q-count" });
    const list = el("div", { id: "q-list" });
    function show() {
      const all = data.questions[runSelect.value];
      const keep = { all: () => true, error: (q) => Boolean(q.error), below: (q) => q.score !== null && q.score < 1, zero: (q) => q.score === 0 }[filter.value];
      const shown = all.filter((q) => keep(q) && matches(questionTexts(q), search.value));
      count.textContent = `${shown.length} of ${all.length} question(s)` + (shown.length > SHOWN ? `; showing the first ${SHOWN}` : "");
      list.replaceChildren(...shown.slice(0, SHOWN).map(questionCard));
    }
    for (const control of [runSelect, filter]) control.addEventListener("change", show);
    search.addEventListener("input", show);
    show();
    return section("questions", "Questions",
      el("div", { class: "controls" }, el("label", {}, "run ", runSelect), el("label", {}, "show ", filter), el("label", {}, "search ", search)),
      count, list);
  }

  // -- a sweep ---------------------------------------------------------------------------------
  function sweepSection() {
    const sweep = data.sweep;
    const chart = el("div", { class: "chart", id: "sweep-chart" });
    const node = section("sweep", `Sweep ${sweep.namespace}/${sweep.name}`,
      el("p", { id: "sweep-heading", text: sweep.heading }), chart,
      sweep.groups.map((group) => el("div", {}, el("h3", { text: `Snapshot ${group.snapshot}` }),
        table(sweep.columns, group.rows, { class: "sweep-table" }))),
      sweep.footer.map((line) => el("p", { class: "small", text: line })));
    const draw = () => {
      const traces = [];
      for (const group of sweep.groups) {
        const known = group.points.filter((p) => p.score !== null && p.ttft_p50_ms !== null);
        traces.push({ type: "scatter", mode: "markers+text", name: `cells (${group.snapshot})`,
          x: known.map((p) => p.ttft_p50_ms), y: known.map((p) => p.score), marker: { size: 9, opacity: 0.75 },
          text: known.map((p) => `${p.label}${p.rank ? " #" + p.rank : ""}`), textposition: "top center",
          hoverinfo: "text+x+y" });
        const front = known.filter((p) => p.pareto).sort((a, b) => a.ttft_p50_ms - b.ttft_p50_ms);
        traces.push({ type: "scatter", mode: "lines+markers", name: `Pareto front (${group.snapshot})`,
          x: front.map((p) => p.ttft_p50_ms), y: front.map((p) => p.score), line: { shape: "hv", width: 2 },
          marker: { size: 14, symbol: "star" }, text: front.map((p) => p.label), hoverinfo: "text+x+y" });
      }
      const unknown = sweep.groups.flatMap((g) => g.points).filter((p) => p.score !== null && p.ttft_p50_ms === null);
      plot(chart, traces, { height: 420, margin: { l: 60, r: 20, t: 10, b: 60 },
        xaxis: { title: { text: "TTFT p50 (ms)" } }, yaxis: { title: { text: "score" } } });
      if (unknown.length) chart.after(el("p", { class: "small", text: `Not on the chart (TTFT unknown): ${unknown.map((p) => p.label).join(", ")}` }));
    };
    return [node, draw];
  }

  // -- the page --------------------------------------------------------------------------------
  const app = document.getElementById("app");
  const [forestNode, forestDraws] = forestSection();
  const sweep = data.sweep ? sweepSection() : null;
  app.replaceChildren(...[header(), notices(), runsSection(), forestNode, compareSection(),
    sweep ? sweep[0] : null, questionsSection()].filter(Boolean));
  if (!window.Plotly) {
    app.prepend(el("p", { class: "notice", id: "no-plotly", text: "Plotly did not load: the charts cannot be drawn." }));
    return;
  }
  forestDraws.forEach((draw) => draw());
  if (sweep) sweep[1]();
  document.body.setAttribute("data-ready", "true");
})();
