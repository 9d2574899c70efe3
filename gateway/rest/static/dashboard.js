// The live page's script: polls dashboard/data (gateway/live.py) once a second and keeps one
// card per model up to date, and, once a tenant has sent something, a table of them above. Rates are
// computed here, from two successive snapshots and the server's own timestamps (the snapshot
// keeps no history). Charts are inline SVG drawn by the small functions below; no library.
// Values the tests read carry data-field attributes.
"use strict";

(function () {
  const POLL_MS = 1000;
  const HISTORY_S = 60;  // the rates chart's span
  const SVG_NS = "http://www.w3.org/2000/svg";
  const COUNTS = ["requests", "answered", "refused", "refused_late", "dropped", "expired", "batches", "instances"];
  const cards = new Map();  // model name -> its card's elements and history
  const TILE_MIN_PX = 128, CHART_MIN_PX = 300;
  let polls = 0;

  // -- small DOM helpers ---------------------------------------------------------------

  function element(tag, attributes, text) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function svg(tag, attributes, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function integer(value) {
    return value === null || value === undefined ? "–" : Math.round(value).toLocaleString("en-US");
  }

  // An axis label in the few characters the left margin holds: 10,502 -> 10.5k, 2,400,000 -> 2.4M.
  function compact(value) {
    if (value === null || value === undefined || !isFinite(value)) return "–";
    const size = Math.abs(value);
    if (size >= 1e6) return decimal(value / 1e6, size >= 1e8 ? 0 : 1) + "M";
    if (size >= 1e4) return decimal(value / 1e3, size >= 1e5 ? 0 : 1) + "k";
    return size >= 10 || value === 0 ? integer(value) : decimal(value, 1);
  }

  // -- rows without a lone item ------------------------------------------------------------

  // A grid of tiles or charts gets as many columns as fit items at least `minWidth` wide (and
  // as wide as the widest value, which never wraps), then as few as keep that many rows: 9
  // tiles where 8 fit are 5 + 4, not 8 + 1. A last row of one item alone is avoided when
  // another column count can.
  function balance(grid, minWidth, values) {
    const items = Array.from(grid.children).filter((item) => !item.hidden);
    if (!items.length) return;
    const style = getComputedStyle(grid);
    const gap = parseFloat(style.columnGap) || 0;
    let widest = minWidth;
    for (const value of values || []) {
      if (value.closest("[hidden]")) continue;
      const range = document.createRange();
      range.selectNodeContents(value);  // the text's own width, whatever its column's
      const tile = value.parentNode;
      const frame = tile.offsetWidth - tile.clientWidth + parseFloat(getComputedStyle(tile).paddingLeft) +
        parseFloat(getComputedStyle(tile).paddingRight);
      widest = Math.max(widest, Math.ceil(range.getBoundingClientRect().width + frame));
    }
    const fit = Math.max(1, Math.min(items.length, Math.floor((grid.clientWidth + gap) / (widest + gap))));
    let best = 1, bestRows = Infinity;
    for (let columns = 1; columns <= fit; columns++) {
      const rows = Math.ceil(items.length / columns);
      const last = items.length - (rows - 1) * columns;
      const alone = last === 1 && rows > 1 && columns > 1;
      if (!alone && rows < bestRows) {
        best = columns;
        bestRows = rows;
      }
    }
    const template = "repeat(" + best + ", minmax(0, 1fr))";
    if (grid.style.gridTemplateColumns !== template) grid.style.gridTemplateColumns = template;
  }

  function layout(card) {
    balance(card.tiles, TILE_MIN_PX, card.values);
    balance(card.charts, CHART_MIN_PX);
  }

  function decimal(value, digits) {
    if (value === null || value === undefined || !isFinite(value)) return "–";
    return value.toLocaleString("en-US", {minimumFractionDigits: digits, maximumFractionDigits: digits});
  }

  function milliseconds(value) {
    if (value === null || value === undefined) return "–";
    return value < 10 ? decimal(value, 2) + " ms" : decimal(value, 1) + " ms";
  }

  // -- a model's card ----------------------------------------------------------------------

  const TILES = [
    // [field, label, class]
    ["queue_rows", "queued rows", ""],
    ["queue_requests", "queued requests", ""],
    ["inflight", "batches in flight", ""],
    ["fleet_load", "predictor load", ""],
    ["demand", "demand / capacity, rows/s", ""],
    ["answered_rate", "answered / s", "answered"],
    ["goodput_rate", "goodput / s", "answered"],
    ["refused_rate", "refused / s", "refused"],
    ["late_rate", "dropped + expired / s", "late"],
    ["mean_batch", "mean batch (recent)", ""],
    ["padding_waste", "padding waste", ""],
  ];

  function createCard(model) {
    const root = element("section", {"class": "card", "data-model": model.name});
    const title = element("h2", {}, model.name);
    const subtitle = element("small", {"data-field": "settings"});
    title.appendChild(subtitle);
    root.appendChild(title);
    const tiles = element("div", {"class": "tiles"});
    const fields = {settings: subtitle};
    const tileOf = {};
    for (const [field, label, kind] of TILES) {
      const tile = element("div", {"class": "tile"});
      tile.appendChild(element("div", {"class": "label"}, label));
      fields[field] = element("div", {"class": "value " + kind, "data-field": field}, "–");
      tile.appendChild(fields[field]);
      tiles.appendChild(tile);
      tileOf[field] = tile;
    }
    root.appendChild(tiles);
    const charts = element("div", {"class": "charts"});
    const figures = {};
    for (const [name, caption] of [["histogram", "Batch sizes (rows per batch, since start)"],
                                   ["recent", "Latest batches (rows each, oldest first)"],
                                   ["departures", "Why batches left the queue"],
                                   ["profile", "Predictor time ℓ(b): learned line, observed means"],
                                   ["rates", "Requests per second, last 60 s"]]) {
      const figure = element("figure", {"data-chart": name});
      const figcaption = element("figcaption", {}, caption);
      const note = element("span", {"class": "note"});
      figcaption.appendChild(note);
      figure.appendChild(figcaption);
      const drawing = svg("svg", {viewBox: "0 0 300 130", role: "img", "aria-label": caption});
      figure.appendChild(drawing);
      charts.appendChild(figure);
      figures[name] = {svg: drawing, note: note, legend: null};
    }
    figures.profile.legend = legend(figures.profile, [["profile", "ℓ(b) learned"], ["observed", "● observed mean"]]);
    figures.rates.legend = legend(figures.rates, [["answered", "answered"], ["refused", "refused"],
                                                 ["late", "dropped + expired"]]);
    root.appendChild(charts);
    const totals = element("p", {"class": "totals"});
    for (const name of COUNTS) {
      totals.appendChild(document.createTextNode(name.replace("_", " ") + " "));
      fields[name] = element("b", {"data-field": name}, "–");
      totals.appendChild(fields[name]);
      totals.appendChild(document.createTextNode("   "));
    }
    root.appendChild(totals);
    const levels = element("table", {"class": "levels", "data-field": "levels"});
    levels.hidden = true;
    root.appendChild(levels);
    const values = TILES.map(([field]) => fields[field]);
    return {root, fields, tileOf, figures, levels, tiles, charts, values, history: []};
  }

  function legend(figure, entries) {
    const line = element("div", {"class": "legend"});
    for (const [kind, label] of entries) line.appendChild(element("span", {"class": kind}, label));
    figure.svg.parentNode.appendChild(line);
    return line;
  }

  // -- rates from successive snapshots -------------------------------------------------------

  function remember(card, time, counts) {
    const history = card.history;
    const last = history[history.length - 1];
    // A count that went down means the model was added again: its past says nothing now.
    if (last && COUNTS.some((name) => counts[name] < last.counts[name])) history.length = 0;
    if (!last || time > last.time) history.push({time, counts});
    while (history.length > 2 && history[0].time < time - HISTORY_S - 1) history.shift();
  }

  function rate(before, after, names) {
    const seconds = after.time - before.time;
    if (seconds <= 0) return null;
    return names.reduce((sum, name) => sum + after.counts[name] - before.counts[name], 0) / seconds;
  }

  const RATE_SERIES = [["answered", ["answered"]], ["refused", ["refused", "refused_late"]],
                       ["late", ["dropped", "expired"]]];

  // -- charts --------------------------------------------------------------------------------

  const W = 300, H = 130, LEFT = 34, RIGHT = 8, TOP = 10, BOTTOM = 20;

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function axes(drawing, yMax, yLabel) {
    drawing.appendChild(svg("line", {"class": "axis", x1: LEFT, y1: H - BOTTOM, x2: W - RIGHT, y2: H - BOTTOM}));
    drawing.appendChild(svg("line", {"class": "axis", x1: LEFT, y1: TOP, x2: LEFT, y2: H - BOTTOM}));
    drawing.appendChild(svg("text", {x: LEFT - 3, y: TOP + 4, "text-anchor": "end"}, yLabel(yMax)));
    drawing.appendChild(svg("text", {x: LEFT - 3, y: H - BOTTOM, "text-anchor": "end"}, yLabel(0)));
  }

  function bucketLabels(bounds) {
    return bounds.map((bound, i) => {
      const low = i === 0 ? 1 : bounds[i - 1] + 1;
      return low === bound ? String(bound) : low + "–" + bound;
    }).concat(["> " + bounds[bounds.length - 1]]);
  }

  function drawHistogram(figure, model) {
    const drawing = figure.svg;
    clear(drawing);
    const {bounds, counts} = model.batch_size;
    const labels = bucketLabels(bounds);
    // Buckets no batch can reach (above max_batch_size) are left out unless something is in them.
    const shown = [];
    counts.forEach((count, i) => {
      const low = i === 0 ? 1 : bounds[i - 1] + 1;
      if (low <= model.max_batch_size || count > 0) shown.push([labels[i], count]);
    });
    const total = counts.reduce((a, b) => a + b, 0);
    const top = Math.max(1, ...shown.map(([, count]) => count));
    const slot = (W - LEFT - RIGHT) / shown.length;
    axes(drawing, top, compact);
    shown.forEach(([label, count], i) => {
      const height = (H - TOP - BOTTOM) * count / top;
      const x = LEFT + i * slot + slot * 0.15;
      drawing.appendChild(svg("rect", {"class": "bar", x: x, y: H - BOTTOM - height, width: slot * 0.7, height: height}));
      drawing.appendChild(svg("text", {x: x + slot * 0.35, y: H - 6, "text-anchor": "middle"}, label));
      if (count > 0) {
        drawing.appendChild(svg("text", {"class": "value-label", x: x + slot * 0.35, y: H - BOTTOM - height - 2,
                                         "text-anchor": "middle"}, integer(count)));
      }
    });
    figure.note.textContent = integer(total) + " batches";
  }

  function drawRecent(figure, model) {
    const drawing = figure.svg;
    clear(drawing);
    const recent = model.batch_size.recent;
    const top = Math.max(1, model.max_batch_size);
    axes(drawing, top, compact);
    const slot = (W - LEFT - RIGHT) / Math.max(recent.length, 60);
    recent.forEach((rows, i) => {
      const height = (H - TOP - BOTTOM) * Math.min(rows, top) / top;
      drawing.appendChild(svg("rect", {"class": "bar", x: LEFT + i * slot, y: H - BOTTOM - height,
                                       width: Math.max(slot * 0.8, 0.5), height: height}));
    });
    drawing.appendChild(svg("text", {x: W - RIGHT, y: H - 6, "text-anchor": "end"}, "max_batch_size " + top));
    const newest = recent[recent.length - 1];
    figure.note.textContent = recent.length ? "newest batch: " + integer(newest) + (newest === 1 ? " row" : " rows") : "";
  }

  function drawDepartures(figure, model, reasons) {
    const drawing = figure.svg;
    clear(drawing);
    const total = reasons.reduce((sum, reason) => sum + (model.departures[reason] || 0), 0);
    const top = Math.max(1, ...reasons.map((reason) => model.departures[reason] || 0));
    const row = (H - TOP) / Math.max(reasons.length, 1);
    // The longest bar leaves room for its label ("10,820 (100%)": about 80 units).
    const start = 92, end = W - 84;
    reasons.forEach((reason, i) => {
      const count = model.departures[reason] || 0;
      const y = TOP + i * row;
      drawing.appendChild(svg("text", {x: start - 6, y: y + row * 0.6, "text-anchor": "end"}, reason));
      drawing.appendChild(svg("rect", {"class": "bar", x: start, y: y + row * 0.2,
                                       width: (end - start) * count / top, height: row * 0.6}));
      const share = total ? " (" + Math.round(100 * count / total) + "%)" : "";
      drawing.appendChild(svg("text", {"class": "value-label", x: start + (end - start) * count / top + 4,
                                       y: y + row * 0.6}, integer(count) + share));
    });
    figure.note.textContent = "";
  }

  function drawProfile(figure, model) {
    const drawing = figure.svg;
    clear(drawing);
    const predicted = model.profile.predicted;
    const observed = model.observed;
    const top = Math.max(0.001, ...predicted.map(([, ms]) => ms), ...observed.map((point) => point.mean_ms)) * 1.1;
    const largest = Math.max(2, model.max_batch_size);
    const x = (size) => LEFT + (W - LEFT - RIGHT) * (size - 1) / (largest - 1);
    const y = (ms) => H - BOTTOM - (H - TOP - BOTTOM) * ms / top;
    axes(drawing, top, (ms) => decimal(ms, ms < 10 ? 1 : 0));
    drawing.appendChild(svg("text", {x: LEFT, y: H - 6, "text-anchor": "start"}, "b = 1"));
    drawing.appendChild(svg("text", {x: W - RIGHT, y: H - 6, "text-anchor": "end"}, String(largest)));
    drawing.appendChild(svg("text", {x: (LEFT + W) / 2, y: H - 6, "text-anchor": "middle"}, "rows per batch → (ms ↑)"));
    if (predicted.length) {
      const points = predicted.map(([size, ms]) => x(size).toFixed(1) + "," + y(ms).toFixed(1)).join(" ");
      drawing.appendChild(svg("polyline", {"class": "profile", points: points}));
    }
    for (const point of observed) {
      const radius = Math.min(5, 1.5 + Math.log10(point.calls + 1));
      const dot = svg("circle", {"class": "observed", cx: x(point.batch_size), cy: y(point.mean_ms), r: radius});
      dot.appendChild(svg("title", {}, "b=" + point.batch_size + ": " + milliseconds(point.mean_ms) + " mean of " +
                                        point.calls + " calls"));
      drawing.appendChild(dot);
    }
    const {intercept_ms: intercept, per_row_ms: perRow} = model.profile;
    figure.note.textContent = intercept === null ? "no calls yet"
      : "ℓ(b) = " + milliseconds(intercept) + " + " + decimal(perRow, 3) + " ms × b";
  }

  function drawRates(figure, card, now) {
    const drawing = figure.svg;
    clear(drawing);
    const history = card.history;
    const series = RATE_SERIES.map(([kind, names]) => {
      const points = [];
      for (let i = 1; i < history.length; i++) {
        const value = rate(history[i - 1], history[i], names);
        if (value !== null) points.push([history[i].time, value]);
      }
      return [kind, points];
    });
    const top = Math.max(1, ...series.flatMap(([, points]) => points.map(([, value]) => value))) * 1.1;
    const x = (time) => LEFT + (W - LEFT - RIGHT) * (time - (now - HISTORY_S)) / HISTORY_S;
    const y = (value) => H - BOTTOM - (H - TOP - BOTTOM) * value / top;
    axes(drawing, top, compact);
    drawing.appendChild(svg("text", {x: LEFT, y: H - 6, "text-anchor": "start"}, "−60 s"));
    drawing.appendChild(svg("text", {x: W - RIGHT, y: H - 6, "text-anchor": "end"}, "now"));
    for (const [kind, points] of series) {
      if (points.length < 1) continue;
      const line = points.map(([time, value]) => x(time).toFixed(1) + "," + y(value).toFixed(1)).join(" ");
      drawing.appendChild(svg("polyline", {"class": kind, points: line}));
    }
    figure.note.textContent = "";
  }

  function drawLevels(table, levels) {
    table.hidden = levels.length === 0;
    clear(table);
    if (!levels.length) return;
    const columns = ["level", "requests", "answered", "refused", "dropped", "expired"];
    const head = element("tr");
    for (const column of columns) head.appendChild(element("th", {}, column));
    table.appendChild(head);
    for (const level of levels) {
      const row = element("tr", {"data-level": level.level});
      for (const column of columns) row.appendChild(element("td", {}, integer(level[column])));
      table.appendChild(row);
    }
  }

  // -- the tenants' table ------------------------------------------------------------------

  // [field, heading]; each row's cells carry data-field, the row data-tenant.
  const TENANT_COLUMNS = [
    ["name", "tenant"], ["level", "level · weight"], ["quotas", "quotas"], ["in_flight", "in flight"],
    ["requests_rate", "requests / s"], ["answered_rate", "answered / s"], ["limited_rate", "429 / s"],
    ["errors_rate", "errors / s"], ["rows_rate", "rows / s"], ["tokens_rate", "tokens / s"],
    ["queue_p99", "queued p99"], ["requests", "requests"], ["refusals", "refusals"],
  ];
  const TENANT_TEXT = new Set(["name", "quotas", "refusals"]);  // left-aligned: words, not figures
  const tenantHistory = new Map();  // tenant name -> its recent counts, oldest first
  let tenantCard = null;

  function createTenantCard() {
    const root = element("section", {"class": "card", id: "tenants"});
    root.appendChild(element("h2", {}, "Tenants"));
    const table = element("table", {"class": "tenants"});
    const head = element("tr");
    for (const [field, heading] of TENANT_COLUMNS) {
      head.appendChild(element("th", TENANT_TEXT.has(field) ? {"class": "text"} : {}, heading));
    }
    table.appendChild(head);
    const scroll = element("div", {"class": "scroll"});  // a narrow window scrolls the table, not the page
    scroll.appendChild(table);
    root.appendChild(scroll);
    root.appendChild(element("p", {"class": "totals"},
      "Rates and the p99 over the last few seconds; requests and refusals since start. Errors: other than 429. " +
      "Refusals: before queued, by the tenant's quota or by the model's queue."));
    return {root, table, rows: new Map()};
  }

  function tenantCounts(tenant, time) {
    let answered = 0, limited = 0, errors = 0;
    for (const [status, count] of Object.entries(tenant.statuses)) {
      if (status.startsWith("2")) answered += count;
      else if (status === "429") limited += count;
      else errors += count;
    }
    return {time, requests: tenant.requests, answered, limited, errors, rows: tenant.rows, tokens: tenant.tokens,
            waits: tenant.queue_wait.counts};
  }

  // The q-quantile of the waits between two snapshots' histograms, interpolated within its
  // bucket as Prometheus' histogram_quantile does (the Grafana panel's); null with none.
  function quantileMs(before, after, bounds, q) {
    const counts = after.waits.map((count, i) => count - (before.waits[i] || 0));
    const total = counts.reduce((a, b) => a + b, 0);
    if (total <= 0) return null;
    const rank = q * total;
    let below = 0;
    for (let i = 0; i < counts.length; i++) {
      if (below + counts[i] >= rank && counts[i] > 0) {
        if (i >= bounds.length) return bounds[bounds.length - 1];  // above the last bound
        const low = i === 0 ? 0 : bounds[i - 1];
        return low + (bounds[i] - low) * (rank - below) / counts[i];
      }
      below += counts[i];
    }
    return bounds[bounds.length - 1];
  }

  function quotaText(quotas) {
    const amount = (value) => (Number.isInteger(value) && value < 1e4 ? integer(value) : compact(value));
    const parts = [];
    if (quotas.requests_per_second !== null) parts.push(amount(quotas.requests_per_second) + " req/s");
    if (quotas.tokens_per_minute !== null) parts.push(amount(quotas.tokens_per_minute) + " tokens/min");
    if (quotas.max_concurrent !== null) parts.push(integer(quotas.max_concurrent) + " at once");
    return parts.length ? parts.join(" · ") : "none";
  }

  function drawTenants(snapshot) {
    const tenants = snapshot.tenants || [];
    if (!tenantCard) {
      tenantCard = createTenantCard();
      const main = document.getElementById("models");
      main.insertBefore(tenantCard.root, main.firstChild);
    }
    tenantCard.root.hidden = tenants.length === 0;
    const now = snapshot.server_time_unix_s;
    const seen = new Set();
    for (const tenant of tenants) {
      seen.add(tenant.name);
      let row = tenantCard.rows.get(tenant.name);
      if (!row) {
        const tr = element("tr", {"data-tenant": tenant.name});
        const cells = {};
        for (const [field] of TENANT_COLUMNS) {
          cells[field] = element("td", TENANT_TEXT.has(field) ? {"data-field": field, "class": "text"}
                                                              : {"data-field": field});
          tr.appendChild(cells[field]);
        }
        row = {tr, cells};
        tenantCard.rows.set(tenant.name, row);
      }
      tenantCard.table.appendChild(row.tr);  // in the snapshot's order: declared tenants first
      const counts = tenantCounts(tenant, now);
      let history = tenantHistory.get(tenant.name) || [];
      const last = history[history.length - 1];
      if (last && counts.requests < last.requests) history = [];  // counted again from zero
      if (!last || now > last.time) history.push(counts);
      while (history.length > 5) history.shift();
      tenantHistory.set(tenant.name, history);
      const before = history[0], after = history[history.length - 1];
      const seconds = after.time - before.time;
      const rateOf = (name) => (seconds > 0 ? (after[name] - before[name]) / seconds : null);
      const cells = row.cells;
      cells.name.textContent = tenant.name + (tenant.declared ? "" : " (removed)");
      cells.level.textContent = (tenant.priority ? String(tenant.priority) : "default") + " · " +
        decimal(tenant.weight, tenant.weight % 1 ? 1 : 0);
      cells.quotas.textContent = quotaText(tenant.quotas);
      cells.in_flight.textContent = integer(tenant.in_flight);
      for (const name of ["requests", "answered", "limited", "errors", "rows", "tokens"]) {
        cells[name + "_rate"].textContent = decimal(rateOf(name), 1);
      }
      const p99 = seconds > 0 ? quantileMs(before, after, tenant.queue_wait.bounds_ms, 0.99) : null;
      cells.queue_p99.textContent = p99 === null ? "–" : milliseconds(p99);
      cells.requests.textContent = integer(tenant.requests);
      const refusals = Object.entries(tenant.refusals);
      cells.refusals.textContent = refusals.length
        ? refusals.map(([reason, count]) => reason + " " + integer(count)).join(" · ") : "0";
    }
    for (const [name, row] of tenantCard.rows) {
      if (!seen.has(name)) {
        row.tr.remove();
        tenantCard.rows.delete(name);
        tenantHistory.delete(name);
      }
    }
  }

  // -- one snapshot --------------------------------------------------------------------------

  function update(card, model, snapshot) {
    const now = snapshot.server_time_unix_s;
    const fields = card.fields;
    remember(card, now, model.counts);
    const slo = model.slo_ms === null ? "" : " · slo " + milliseconds(model.slo_ms);
    const levels = model.priority_levels ? " · " + model.priority_levels + " priority levels" : "";
    fields.settings.textContent = "policy " + model.policy + " · max batch " + model.max_batch_size + slo + levels;
    fields.queue_rows.textContent = integer(model.queue.rows);
    fields.queue_requests.textContent = integer(model.queue.requests);
    fields.inflight.textContent = model.inflight.batches + " / " + model.inflight.limit +
      (model.inflight.auto ? " auto" : "");
    // The autoscaling signal: demand over the capacity of the replicas in rotation.
    const load = model.load;
    const replicas = load.replicas + (load.replicas === 1 ? " replica" : " replicas");
    fields.fleet_load.textContent = (load.load === null ? "–" : decimal(load.load, 2)) + " · " + replicas;
    fields.demand.textContent = compact(load.demand_rows_per_second) + " / " +
      (load.capacity_rows_per_second === null ? "–" : compact(load.capacity_rows_per_second) + " × " + load.replicas);
    const history = card.history;
    // Rates over the last few seconds: one poll apart is noisy at low rates.
    const before = history[Math.max(0, history.length - 4)], after = history[history.length - 1];
    const rateOf = (names) => (history.length > 1 ? rate(before, after, names) : null);
    fields.answered_rate.textContent = decimal(rateOf(["answered"]), 1);
    fields.refused_rate.textContent = decimal(rateOf(["refused", "refused_late"]), 1);
    fields.late_rate.textContent = decimal(rateOf(["dropped", "expired"]), 1);
    card.tileOf.goodput_rate.hidden = model.goodput === null;
    fields.goodput_rate.textContent = model.goodput === null ? "–" : decimal(rateOf(["answered"]), 1);
    const recent = model.batch_size.recent;
    fields.mean_batch.textContent = recent.length ? decimal(recent.reduce((a, b) => a + b, 0) / recent.length, 1) : "–";
    card.tileOf.padding_waste.hidden = model.padding === null;
    fields.padding_waste.textContent = model.padding === null ? "–" : decimal(model.padding.waste, 2) + "×";
    for (const name of COUNTS) fields[name].textContent = integer(model.counts[name]);
    drawHistogram(card.figures.histogram, model);
    drawRecent(card.figures.recent, model);
    drawDepartures(card.figures.departures, model, snapshot.departure_reasons);
    drawProfile(card.figures.profile, model);
    drawRates(card.figures.rates, card, now);
    drawLevels(card.levels, model.levels);
    layout(card);
  }

  function render(snapshot) {
    const main = document.getElementById("models");
    const empty = document.getElementById("empty");
    if (empty) empty.remove();
    drawTenants(snapshot);
    const seen = new Set();
    for (const model of snapshot.models) {
      seen.add(model.name);
      let card = cards.get(model.name);
      if (!card) {
        card = createCard(model);
        cards.set(model.name, card);
        main.appendChild(card.root);
      }
      update(card, model, snapshot);
    }
    for (const [name, card] of cards) {
      if (!seen.has(name)) {
        card.root.remove();
        cards.delete(name);
      }
    }
    document.getElementById("clock").textContent =
      "server time " + new Date(snapshot.server_time_unix_s * 1000).toLocaleTimeString("en-GB");
  }

  function status(state, text) {
    const node = document.getElementById("status");
    node.dataset.state = state;
    node.textContent = text;
  }

  async function poll() {
    try {
      const response = await fetch("dashboard/data", {cache: "no-store", headers: {Accept: "application/json"}});
      if (response.ok) {
        render(await response.json());
        polls += 1;
        document.body.dataset.polls = String(polls);
        status("live", "live");
      } else if (response.status === 401) {
        status("error", "401: this gateway needs an Authorization: Bearer header");
      } else {
        status("error", "gateway answered " + response.status);
      }
    } catch (error) {
      status("error", "gateway unreachable");
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  window.addEventListener("resize", () => { for (const card of cards.values()) layout(card); });
  poll();
})();
