"use strict";
// edge's dashboard. It reads edge's API, found relative to this page
// ({basePath}dashboard/ -> {basePath}api/), every POLL_MS and draws what it read.
// Every value that came from the configuration reaches the page as text
// (textContent, text nodes, attribute values), never as markup: there is no
// innerHTML here, and the page's Content-Security-Policy runs no inline script.
//
// Request rates and error ratios come from /api/requests (edge's metrics
// counters): the difference between the latest read and the oldest one of the
// last RATE_WINDOW_S seconds.

const POLL_MS = 2000;
const RATE_WINDOW_S = 10;
const API = new URL("../api/", document.baseURI);

const SECTIONS = [
  { path: "", title: "Overview" },
  { path: "http/routers", title: "HTTP routers", counts: ["http", "routers"] },
  { path: "http/services", title: "HTTP services", counts: ["http", "services"] },
  { path: "http/middlewares", title: "HTTP middlewares", counts: ["http", "middlewares"] },
  { path: "tcp/routers", title: "TCP routers", counts: ["tcp", "routers"] },
  { path: "tcp/services", title: "TCP services", counts: ["tcp", "services"] },
  { path: "tcp/middlewares", title: "TCP middlewares", counts: ["tcp", "middlewares"] },
  { path: "udp/routers", title: "UDP routers", counts: ["udp", "routers"] },
  { path: "udp/services", title: "UDP services", counts: ["udp", "services"] },
];
const FILTERS = ["search", "status", "serviceName", "middlewareName", "page"];

const state = {
  route: { path: "", search: "", status: "", serviceName: "", middlewareName: "", page: 1 },
  history: [], // /api/requests reads of the last RATE_WINDOW_S seconds, oldest first
  open: new Set(), // the details opened, by section and name
  overview: null, // the latest /api/overview
  seq: 0,
  timer: 0,
};

// -- DOM --------------------------------------------------------------------------

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function link(route, ...children) {
  return el("a", { href: hashFor(route) }, ...children);
}

function badge(status) {
  return el("span", { class: `badge ${status || "unknown"}` }, status || "unknown");
}

// -- the address: #/<section>?search=...&status=... -------------------------------

function readHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const cut = raw.indexOf("?");
  const path = cut < 0 ? raw : raw.slice(0, cut);
  const params = new URLSearchParams(cut < 0 ? "" : raw.slice(cut + 1));
  const route = { path: SECTIONS.some((s) => s.path === path) ? path : "" };
  for (const key of FILTERS) route[key] = params.get(key) || "";
  route.page = Math.max(1, Number.parseInt(route.page, 10) || 1);
  return route;
}

function hashFor(route) {
  const params = new URLSearchParams();
  for (const key of FILTERS) {
    const value = route[key];
    if (value && !(key === "page" && Number(value) === 1)) params.set(key, String(value));
  }
  const query = params.toString();
  return `#/${route.path || ""}${query ? `?${query}` : ""}`;
}

// -- the API ------------------------------------------------------------------------

class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function getJSON(path, params) {
  const url = new URL(path, API);
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== "" && value !== undefined && value !== null) url.searchParams.set(key, value);
  }
  const response = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    throw new APIError(response.status, (body && body.message) || `${response.status}`);
  }
  return { body, next: Number(response.headers.get("X-Next-Page") || "1") };
}

async function loadSection(route) {
  if (!route.path) {
    const entryPoints = await getJSON("entrypoints", { per_page: 1000 });
    return { entryPoints: entryPoints.body };
  }
  const params = { search: route.search, status: route.status, page: route.page };
  if (route.path.endsWith("/routers")) {
    params.serviceName = route.serviceName;
    params.middlewareName = route.middlewareName;
  }
  try {
    const list = await getJSON(route.path, params);
    return { items: list.body, next: list.next };
  } catch (error) {
    // A page past the end (the list shrank since): go back to the first.
    if (error instanceof APIError && error.status === 400 && route.page > 1) {
      location.hash = hashFor({ ...route, page: 1 });
      return null;
    }
    throw error;
  }
}

// -- rates --------------------------------------------------------------------------

function record(read) {
  const history = state.history;
  const last = history[history.length - 1];
  if (last && read.time <= last.time) return;
  history.push(read);
  while (history.length > 2 && read.time - history[1].time >= RATE_WINDOW_S) history.shift();
}

// {rate, ratio4xx, ratio5xx, total} of one element, or null where none is counted.
function rateOf(scope, name) {
  const history = state.history;
  const last = history[history.length - 1];
  if (!last || !last.metrics || !last[scope]) return null;
  const now = last[scope][name];
  if (!now) return { total: 0, rate: history.length > 1 ? 0 : null, ratio4xx: null, ratio5xx: null };
  const out = { total: now.requests, rate: null, ratio4xx: null, ratio5xx: null };
  const first = history[0];
  if (first === last) return out;
  const then = (first[scope] || {})[name] || { requests: 0 };
  const requests = now.requests - then.requests;
  if (requests < 0) return out; // counters started again (a restart)
  out.rate = requests / (last.time - first.time);
  if (requests > 0) {
    out.ratio4xx = ((now["4xx"] || 0) - (then["4xx"] || 0)) / requests;
    out.ratio5xx = ((now["5xx"] || 0) - (then["5xx"] || 0)) / requests;
  }
  return out;
}

function rateText(value) {
  if (value === null || value === undefined) return "–";
  if (value === 0) return "0";
  return value < 10 ? value.toFixed(2) : value.toFixed(0);
}

function ratioText(value) {
  if (value === null || value === undefined) return "–";
  return `${(value * 100).toFixed(value === 0 || value === 1 ? 0 : 1)} %`;
}

function rateCells(scope, name) {
  const r = rateOf(scope, name);
  const why = rateTitle(scope);
  if (!r) return [el("td", { class: "num rate", title: why }, "–"), el("td", { class: "num" }, "–"), el("td", { class: "num" }, "–")];
  return [
    el("td", { class: "num rate", title: `${r.total} requests counted` }, rateText(r.rate)),
    el("td", { class: `num r4xx${r.ratio4xx ? " warn" : ""}` }, ratioText(r.ratio4xx)),
    el("td", { class: `num r5xx${r.ratio5xx ? " bad" : ""}` }, ratioText(r.ratio5xx)),
  ];
}

const LABELS = { entryPoints: "addEntryPointsLabels", routers: "addRoutersLabels", services: "addServicesLabels" };

function rateTitle(scope) {
  const last = state.history[state.history.length - 1];
  if (!last || !last.metrics) return "rates need metrics.prometheus in the static configuration";
  return `not counted: metrics.prometheus.${LABELS[scope]} is false`;
}

function openConnections(name) {
  const last = state.history[state.history.length - 1];
  const open = last && last.openConnections ? last.openConnections[name] : undefined;
  return open === undefined ? "–" : open;
}

const RATE_HEADS = [
  el("th", { class: "num", title: "requests per second" }, "req/s"),
  el("th", { class: "num", title: "share of 4xx answers" }, "4xx"),
  el("th", { class: "num", title: "share of 5xx answers" }, "5xx"),
];

// -- sections -----------------------------------------------------------------------

function errorsCell(rep) {
  const errors = rep.error || [];
  return el("td", { class: "errors" }, errors.map((e) => el("div", {}, e)));
}

function list(values, each) {
  return (values || []).map((v, i) => [i ? ", " : "", each ? each(v) : v]);
}

function nameCell(section, rep) {
  const key = `${section}\u0000${rep.name}`;
  const details = el(
    "details",
    {
      open: state.open.has(key),
      ontoggle: () => (details.open ? state.open.add(key) : state.open.delete(key)),
    },
    el("summary", {}, rep.name),
    el("pre", {}, JSON.stringify(rep, null, 2)),
  );
  return el("td", { class: "name" }, details);
}

function servers(rep) {
  const lb = rep.loadBalancer || {};
  const status = rep.serverStatus || {};
  return (lb.servers || []).map((server) => {
    const where = server.url || server.address || "";
    const health = status[where];
    return el(
      "div",
      { class: "server" },
      health ? el("span", { class: `health ${health.toLowerCase()}` }, health) : null,
      " ",
      where,
      server.weight !== undefined ? el("span", { class: "muted" }, ` weight ${server.weight}`) : null,
    );
  });
}

function typeConfig(rep) {
  const key = Object.keys(rep).find((k) => k.toLowerCase() === rep.type);
  return key ? JSON.stringify(rep[key]) : "";
}

function routersFiltered(protocol, filter) {
  return (name) => link({ path: `${protocol}/routers`, [filter]: name }, name);
}

const COLUMNS = {
  routers: (protocol) => [
    ["Status", (r) => el("td", { class: "status" }, badge(r.status))],
    ["Name", (r, s) => nameCell(s, r)],
    protocol === "udp" ? null : ["Rule", (r) => el("td", { class: "rule" }, r.rule || "")],
    ["Entry points", (r) => el("td", {}, list(r.using || r.entryPoints))],
    ["Service", (r) => el("td", {}, r.service ? link({ path: `${protocol}/services`, search: r.service.split("@")[0] }, r.service) : "")],
    protocol === "udp" ? null : ["Middlewares", (r) => el("td", {}, list(r.middlewares, (m) => link({ path: `${protocol}/middlewares`, search: m.split("@")[0] }, m)))],
    protocol === "udp" ? null : ["TLS", (r) => el("td", {}, r.tls ? (r.tls.passthrough ? "passthrough" : "yes") : "")],
    protocol === "http" ? ["Priority", (r) => el("td", { class: "num" }, r.priority ?? "")] : null,
    protocol === "http" ? [RATE_HEADS, (r) => rateCells("routers", r.name)] : null,
    ["Errors", errorsCell],
  ],
  services: (protocol) => [
    ["Status", (r) => el("td", { class: "status" }, badge(r.status))],
    ["Name", (r, s) => nameCell(s, r)],
    ["Type", (r) => el("td", {}, r.type || "")],
    ["Servers", (r) => el("td", { class: "servers" }, servers(r))],
    ["Used by", (r) => el("td", {}, list(r.usedBy, routersFiltered(protocol, "serviceName")))],
    protocol === "http" ? [RATE_HEADS, (r) => rateCells("services", r.name)] : null,
    ["Errors", errorsCell],
  ],
  middlewares: (protocol) => [
    ["Status", (r) => el("td", { class: "status" }, badge(r.status))],
    ["Name", (r, s) => nameCell(s, r)],
    ["Type", (r) => el("td", {}, r.type || "")],
    ["Configuration", (r) => el("td", { class: "config" }, typeConfig(r))],
    ["Used by", (r) => el("td", {}, list(r.usedBy, routersFiltered(protocol, "middlewareName")))],
    ["Errors", errorsCell],
  ],
};

function drawList(route, data) {
  const [protocol, kind] = route.path.split("/");
  const columns = COLUMNS[kind](protocol).filter(Boolean);
  const head = el("tr", {}, columns.map(([title]) => (typeof title === "string" ? el("th", {}, title) : title.map((th) => th.cloneNode(true)))));
  const rows = data.items.map((rep) =>
    el("tr", { "data-name": rep.name, class: rep.status }, columns.map(([, cell]) => cell(rep, route.path))),
  );
  const pager = el(
    "div",
    { class: "pager" },
    route.page > 1 ? link({ ...route, page: route.page - 1 }, "← previous") : null,
    ` page ${route.page} `,
    data.next > 1 ? link({ ...route, page: data.next }, "next →") : null,
  );
  const empty = rows.length ? null : el("p", { class: "muted empty" }, "Nothing here", route.search || route.status ? " matches these filters" : "", ".");
  return [
    el("h2", {}, SECTIONS.find((s) => s.path === route.path).title),
    el("table", { class: `list ${kind}` }, el("thead", {}, head), el("tbody", {}, rows)),
    empty,
    rows.length && (route.page > 1 || data.next > 1) ? pager : null,
  ];
}

function drawOverview(overview, data) {
  const cards = SECTIONS.filter((s) => s.counts).map((s) => {
    const counts = (overview[s.counts[0]] || {})[s.counts[1]];
    if (!counts) return null;
    return el(
      "div",
      { class: "card", "data-section": s.path },
      el("h3", {}, link({ path: s.path }, s.title)),
      el("div", { class: "total" }, counts.total),
      el(
        "div",
        { class: "counts" },
        counts.warnings ? link({ path: s.path, status: "warning" }, el("span", { class: "badge warning" }, `${counts.warnings} warning`)) : null,
        counts.errors ? link({ path: s.path, status: "disabled" }, el("span", { class: "badge disabled" }, `${counts.errors} disabled`)) : null,
        !counts.warnings && !counts.errors && counts.total ? el("span", { class: "badge enabled" }, "all enabled") : null,
      ),
    );
  });
  const last = state.history[state.history.length - 1];
  const features = overview.features || {};
  const rows = (data.entryPoints || []).map((ep) => {
    const udp = (ep.address || "").endsWith("/udp");
    const responding = (ep.transport || {}).respondingTimeouts || {};
    return el(
      "tr",
      { "data-name": ep.name },
      el("td", { class: "name" }, ep.name),
      el("td", {}, ep.address || ""),
      el("td", {}, udp ? "UDP" : "TCP"),
      udp ? [el("td", { class: "num" }, "–"), el("td", { class: "num" }, "–"), el("td", { class: "num" }, "–")] : rateCells("entryPoints", ep.name),
      el("td", { class: "num open" }, openConnections(ep.name)),
      el("td", { class: "muted" }, udp ? `timeout ${(ep.udp || {}).timeout || ""}` : Object.entries(responding).map(([k, v]) => `${k.replace("Timeout", "")} ${v}`).join(", ")),
    );
  });
  return [
    el("h2", {}, "Overview"),
    el("div", { class: "cards" }, cards),
    el("h2", {}, "Entry points"),
    last && !last.metrics ? el("p", { class: "note" }, "Request rates need ", el("code", {}, "metrics.prometheus"), " in the static configuration.") : null,
    el(
      "table",
      { class: "list entrypoints" },
      el("thead", {}, el("tr", {}, el("th", {}, "Name"), el("th", {}, "Address"), el("th", {}, "Protocol"), RATE_HEADS.map((th) => th.cloneNode(true)), el("th", { class: "num" }, "Open"), el("th", {}, "Timeouts"))),
      el("tbody", {}, rows),
    ),
    el(
      "p",
      { class: "muted" },
      "Providers: ",
      list(overview.providers),
      (overview.providers || []).length ? "" : "none",
      ". Access log: ",
      features.accessLog ? "on" : "off",
      ". Metrics: ",
      last && last.metrics ? "on" : "off",
      ".",
    ),
  ];
}

// -- the page -----------------------------------------------------------------------

function drawNav(overview) {
  const nav = document.getElementById("nav");
  if (!nav.childElementCount) {
    for (const s of SECTIONS) {
      nav.append(el("a", { href: hashFor({ path: s.path }), "data-path": s.path }, el("span", { class: "title" }, s.title), " ", el("span", { class: "count" })));
    }
  }
  for (const a of nav.children) {
    const s = SECTIONS.find((x) => x.path === a.dataset.path);
    a.classList.toggle("current", s.path === state.route.path);
    const counts = overview && s.counts ? (overview[s.counts[0]] || {})[s.counts[1]] : null;
    const count = a.querySelector(".count");
    count.textContent = counts ? String(counts.total) : "";
    count.classList.toggle("bad", Boolean(counts && counts.errors));
    count.title = counts && counts.errors ? `${counts.errors} disabled` : "";
  }
}

function drawFilters() {
  const route = state.route;
  const form = document.getElementById("filters");
  form.hidden = !route.path;
  const search = document.getElementById("search");
  if (document.activeElement !== search) search.value = route.search;
  document.getElementById("status").value = route.status;
  const chips = document.getElementById("chips");
  chips.replaceChildren(
    ...["serviceName", "middlewareName"]
      .filter((key) => route[key])
      .map((key) => el("span", { class: "chip" }, `${key === "serviceName" ? "service" : "middleware"}: ${route[key]} `, link({ ...route, [key]: "", page: 1 }, "×"))),
  );
}

function setPoll(text, failed) {
  const poll = document.getElementById("poll");
  poll.textContent = text;
  poll.classList.toggle("failed", Boolean(failed));
}

async function poll() {
  clearTimeout(state.timer);
  const seq = ++state.seq;
  const route = state.route;
  try {
    const [overview, requests, section] = await Promise.all([
      getJSON("overview"),
      getJSON("requests"),
      loadSection(route),
    ]);
    if (seq !== state.seq || section === null) return;
    record(requests.body);
    state.overview = overview.body;
    drawNav(overview.body);
    const drawn = route.path ? drawList(route, section) : drawOverview(overview.body, section);
    const next = el("section", { id: "view", "aria-live": "off" }, drawn);
    const view = document.getElementById("view");
    if (!next.isEqualNode(view)) view.replaceWith(next); // else keep it (and the selection)
    setPoll(`updated ${new Date().toLocaleTimeString()}, every ${POLL_MS / 1000} s`);
  } catch (error) {
    if (seq !== state.seq) return;
    setPoll(`cannot read the API: ${error.message}`, true);
  } finally {
    if (seq === state.seq) state.timer = setTimeout(poll, POLL_MS);
  }
}

function onRoute() {
  state.route = readHash();
  drawNav(state.overview);
  drawFilters();
  poll();
}

function start() {
  let typing = 0;
  document.getElementById("search").addEventListener("input", (event) => {
    clearTimeout(typing);
    const value = event.target.value;
    typing = setTimeout(() => {
      location.hash = hashFor({ ...state.route, search: value, page: 1 });
    }, 250);
  });
  document.getElementById("status").addEventListener("change", (event) => {
    location.hash = hashFor({ ...state.route, status: event.target.value, page: 1 });
  });
  document.getElementById("filters").addEventListener("submit", (event) => event.preventDefault());
  window.addEventListener("hashchange", onRoute);
  getJSON("version")
    .then(({ body }) => {
      document.getElementById("version").textContent = `${body.Version} (since ${new Date(body.startDate).toLocaleString()})`;
      if (body.dashboardName) {
        document.getElementById("name").textContent = body.dashboardName;
        document.title = `${body.dashboardName} · edge`;
      }
    })
    .catch(() => {});
  onRoute();
}

start();
