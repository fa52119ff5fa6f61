// hearth's web console. Every action is an API call made with the token
// the user signed in with, kept in this tab's session storage only. What
// a sandbox holds (names, reasons, files, output) is attacker input: it is
// only ever put in the page as text, never as markup.
"use strict";

const tokenKey = "hearth.token";
const loginShell = "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l";
const view = document.getElementById("view");
let stopView = () => {}; // stops the current view's timers and sockets

// el makes an element: attrs are properties (on* are listeners), children
// strings (as text) or nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e[k] = v;
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return e;
}

function token() { return sessionStorage.getItem(tokenKey) || ""; }

function showError(err) {
  const box = document.getElementById("error");
  box.textContent = err && err.message ? err.message + (err.hint ? "\n" + err.hint : "") : String(err);
  box.hidden = false;
  setTimeout(() => { box.hidden = true; }, 8000);
}

// api calls the daemon and returns its JSON (or the raw response with
// raw); an error answer is thrown as the API's error object.
async function api(method, path, body, raw) {
  const opts = { method, headers: { Authorization: "Bearer " + token() } };
  if (body instanceof Blob || body instanceof ArrayBuffer) {
    opts.body = body;
  } else if (body !== undefined) {
    opts.body = JSON.stringify(body);
    opts.headers["Content-Type"] = "application/json";
  }
  const resp = await fetch(path, opts);
  if (resp.status === 401) {
    sessionStorage.removeItem(tokenKey);
    location.hash = "#/login";
    throw { message: "the token was refused: sign in again" };
  }
  if (!resp.ok) {
    let e = { message: resp.status + " " + resp.statusText };
    try { e = (await resp.json()).error || e; } catch (_) {}
    throw e;
  }
  if (raw) return resp;
  if (resp.status === 204) return null;
  return resp.json();
}

function sbPath(ref, rest) { return "/v1/sandboxes/" + encodeURIComponent(ref) + (rest || ""); }
function refOf(sb) { return sb.tenant + "/" + sb.name; }

function bytes(n) {
  if (!n) return "0 B";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function ago(t) {
  const s = Math.max(0, (Date.now() - Date.parse(t)) / 1000);
  if (s < 90) return Math.round(s) + "s";
  if (s < 5400) return Math.round(s / 60) + "m";
  if (s < 129600) return Math.round(s / 3600) + "h";
  return Math.round(s / 86400) + "d";
}

function left(t) {
  if (!t) return "—";
  const s = (Date.parse(t) - Date.now()) / 1000;
  if (s <= 0) return "expired";
  return s < 5400 ? Math.round(s / 60) + "m" : Math.round(s / 3600) + "h";
}

// spark draws values (0..max) as a small line.
function spark(values, max) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 90 22");
  const line = document.createElementNS(ns, "polyline");
  const n = values.length;
  const top = Math.max(max || 0, ...values, 1e-9);
  line.setAttribute("points", values.map((v, i) => ((n < 2 ? 0 : i * 90 / (n - 1)).toFixed(1) + "," + (21 - v / top * 20).toFixed(1))).join(" "));
  svg.append(line);
  return svg;
}

// every runs fn now and then every ms until the view changes.
function every(ms, fn) {
  let live = true;
  const tick = async () => {
    if (!live) return;
    try { await fn(); } catch (e) { showError(e); }
    if (live) timer = setTimeout(tick, ms);
  };
  let timer = setTimeout(tick, 0);
  return () => { live = false; clearTimeout(timer); };
}

// --- sign in ---

function loginView() {
  const input = el("input", { type: "password", id: "token", placeholder: "hearth_…", autocomplete: "off" });
  const form = el("form", { className: "card login", onsubmit: async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(tokenKey, input.value.trim());
    try {
      await api("GET", "/v1/limits");
      location.hash = "#/";
    } catch (e) {
      sessionStorage.removeItem(tokenKey);
      showError(e);
    }
  } },
  el("h1", {}, "Sign in"),
  el("p", { className: "muted" }, "A hearth token: an operator's, a tenant admin's or an agent's. It stays in this tab."),
  input, el("button", { className: "primary", type: "submit", id: "signin" }, "Sign in"));
  view.replaceChildren(form);
  input.focus();
  return () => {};
}

// --- the sandboxes ---

function listView() {
  const history = new Map(); // ref → recent cpu_cores
  const memHistory = new Map(); // ref → recent memory_bytes
  const body = el("tbody", { id: "sandboxes" });
  const create = el("form", { className: "inline", onsubmit: async (ev) => {
    ev.preventDefault();
    const name = create.elements.name.value.trim();
    try {
      await api("POST", "/v1/sandboxes", name ? { name } : {});
      create.reset();
      refresh();
    } catch (e) { showError(e); }
  } }, el("input", { name: "name", placeholder: "new sandbox name" }), el("button", { type: "submit" }, "Create"));
  view.replaceChildren(el("h1", {}, "Sandboxes"), create,
    el("table", {}, el("thead", {}, el("tr", {}, ["Sandbox", "Status", "Size", "Owner", "Age", "TTL left", "CPU", "Memory", "Disk"].map((h) => el("th", {}, h)))), body));
  const refresh = async () => {
    const { sandboxes } = await api("GET", "/v1/sandboxes");
    const usage = await Promise.all(sandboxes.map((sb) => api("GET", sbPath(refOf(sb), "/usage")).catch(() => null)));
    const rows = sandboxes.map((sb, i) => {
      const u = usage[i];
      const ref = refOf(sb);
      const h = history.get(ref) || [];
      const m = memHistory.get(ref) || [];
      if (u && sb.status === "running") { h.push(u.cpu_cores); m.push(u.memory_bytes); }
      while (h.length > 30) h.shift();
      while (m.length > 30) m.shift();
      history.set(ref, h);
      memHistory.set(ref, m);
      return el("tr", { dataset: { ref } },
        el("td", {}, el("a", { href: "#/sb/" + encodeURIComponent(ref) }, ref)),
        el("td", {}, el("span", { className: "status-" + sb.status }, sb.status), sb.reason ? el("div", { className: "reason" }, sb.reason) : null),
        el("td", {}, sb.size),
        el("td", {}, sb.owner),
        el("td", { className: "num" }, ago(sb.created_at)),
        el("td", { className: "num" }, left(sb.expires_at)),
        el("td", { className: "num" }, spark(h, 1), " ", u && sb.status === "running" ? Math.round(u.cpu_cores * 100) + "%" : "—"),
        el("td", { className: "num" }, spark(m, u ? u.limit_memory_bytes : 0), " ", u && sb.status === "running" ? bytes(u.memory_bytes) + " / " + bytes(u.limit_memory_bytes) : "—"),
        el("td", { className: "num" }, u ? bytes(u.disk_bytes) : "—"));
    });
    body.replaceChildren(...rows);
  };
  return every(2000, refresh);
}

// --- one sandbox ---

function sandboxView(ref, tab) {
  const head = el("div", { className: "card" });
  const pane = el("div", {});
  const tabs = ["terminal", "files", "checkpoints", "urls"];
  view.replaceChildren(el("h1", {}, ref), head,
    el("nav", { className: "tabs" }, tabs.map((t) => el("a", { href: "#/sb/" + encodeURIComponent(ref) + "/" + t, className: t === tab ? "on" : "", id: "tab-" + t }, t))), pane);
  const stopHead = every(3000, async () => {
    const sb = await api("GET", sbPath(ref));
    head.replaceChildren(
      el("div", {}, el("span", { className: "status-" + sb.status, id: "status" }, sb.status), " · ", sb.size, " · owner ", sb.owner, " · ", sb.image, " · node ", sb.node || "—"),
      sb.reason ? el("div", { className: "reason", id: "reason" }, sb.reason) : null,
      el("div", { className: "muted" }, "created ", ago(sb.created_at), " ago · TTL left ", left(sb.expires_at), " · head ", sb.head || "—"),
      el("div", { className: "inline" },
        el("button", { onclick: () => act("POST", sbPath(ref, "/sleep")) }, "Sleep"),
        el("button", { onclick: () => act("POST", sbPath(ref, "/wake")) }, "Wake"),
        el("button", { onclick: async () => { if (confirm("Destroy " + ref + " and its disk?")) { await act("DELETE", sbPath(ref)); location.hash = "#/"; } } }, "Destroy")));
  });
  const stopPane = ({ terminal: terminalPane, files: filesPane, checkpoints: checkpointsPane, urls: urlsPane }[tab] || terminalPane)(ref, pane);
  return () => { stopHead(); stopPane(); };
}

async function act(method, path, body) {
  try { return await api(method, path, body); } catch (e) { showError(e); return null; }
}

// terminalPane runs a login shell on a terminal, over the exec WebSocket
// (the token goes as its subprotocol: a browser sets no header there).
function terminalPane(ref, pane) {
  const box = el("div", { id: "terminal" });
  const state = el("div", { className: "muted", id: "terminal-state" }, "connecting…");
  pane.replaceChildren(box, state);
  const term = new Terminal({ cursorBlink: true, fontSize: 14, convertEol: false });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  const b64 = btoa(token()).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + sbPath(ref, "/exec"), ["hearth.v1", "bearer." + b64]);
  ws.binaryType = "arraybuffer";
  const enc = new TextEncoder();
  ws.onopen = () => {
    ws.send(JSON.stringify({ shell: loginShell, stdin: true, tty: { rows: term.rows, cols: term.cols } }));
    state.textContent = "connected";
    term.focus();
  };
  ws.onmessage = (ev) => {
    if (typeof ev.data === "string") {
      const end = JSON.parse(ev.data);
      state.textContent = end.type === "exit" ? "ended with exit code " + end.result.exit_code : "error: " + end.error.message;
      return;
    }
    const b = new Uint8Array(ev.data);
    if (b[0] === 1 || b[0] === 2) term.write(b.subarray(1));
  };
  ws.onclose = () => { if (state.textContent === "connected") state.textContent = "disconnected"; };
  const input = term.onData((d) => {
    if (ws.readyState !== WebSocket.OPEN) return;
    const data = enc.encode(d);
    const msg = new Uint8Array(data.length + 1);
    msg[0] = 0;
    msg.set(data, 1);
    ws.send(msg);
  });
  const resized = term.onResize(({ rows, cols }) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ resize: { rows, cols } }));
  });
  const onWindow = () => fit.fit();
  window.addEventListener("resize", onWindow);
  return () => { input.dispose(); resized.dispose(); window.removeEventListener("resize", onWindow); ws.close(); term.dispose(); };
}

function filesPane(ref, pane) {
  let dir = "/home/sandbox";
  const where = el("input", { id: "path", value: dir, size: 50 });
  const list = el("tbody", { id: "files" });
  const shown = el("div", {});
  const upload = el("input", { type: "file", id: "upload" });
  const load = async () => {
    dir = where.value;
    const { entries } = await api("GET", sbPath(ref, "/fs/list?path=" + encodeURIComponent(dir)));
    list.replaceChildren(...entries.map((f) => {
      const full = (dir.endsWith("/") ? dir : dir + "/") + f.name;
      const open = f.type === "dir"
        ? el("a", { href: "#", onclick: (ev) => { ev.preventDefault(); where.value = full; load().catch(showError); } }, f.name + "/")
        : el("a", { href: "#", onclick: (ev) => { ev.preventDefault(); view_(full).catch(showError); } }, f.name);
      return el("tr", {}, el("td", {}, open), el("td", { className: "num" }, f.type === "dir" ? "" : bytes(f.size)), el("td", { className: "muted" }, (f.mode & 0o7777).toString(8).padStart(4, "0")),
        el("td", {}, f.type === "dir" ? null : el("button", { onclick: () => download(full, f.name).catch(showError) }, "Download")));
    }));
  };
  const view_ = async (path) => {
    const resp = await api("GET", sbPath(ref, "/fs/file?path=" + encodeURIComponent(path)), undefined, true);
    const text = await resp.text();
    shown.replaceChildren(el("h2", {}, path), el("pre", { className: "file", id: "file-content" }, text.length > 200000 ? text.slice(0, 200000) + "\n…" : text));
  };
  const download = async (path, name) => {
    const resp = await api("GET", sbPath(ref, "/fs/file?path=" + encodeURIComponent(path)), undefined, true);
    const url = URL.createObjectURL(await resp.blob());
    const a = el("a", { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  };
  pane.replaceChildren(
    el("form", { className: "inline", onsubmit: (ev) => { ev.preventDefault(); load().catch(showError); } }, where, el("button", { type: "submit" }, "List")),
    el("form", { className: "inline", onsubmit: async (ev) => {
      ev.preventDefault();
      const f = upload.files[0];
      if (!f) return;
      const path = (dir.endsWith("/") ? dir : dir + "/") + f.name;
      if (await act("PUT", sbPath(ref, "/fs/file?path=" + encodeURIComponent(path)), f)) {
        document.getElementById("upload-state").textContent = "uploaded " + path;
        load().catch(showError);
      }
    } }, upload, el("button", { type: "submit", id: "upload-button" }, "Upload here"), el("span", { className: "muted", id: "upload-state" })),
    el("table", {}, el("thead", {}, el("tr", {}, ["Name", "Size", "Mode", ""].map((h) => el("th", {}, h)))), list), shown);
  load().catch(showError);
  return () => {};
}

function checkpointsPane(ref, pane) {
  const list = el("tbody", { id: "checkpoints" });
  const take = el("form", { className: "inline", onsubmit: async (ev) => {
    ev.preventDefault();
    const req = { label: take.elements.label.value };
    if (take.elements.memory.checked) req.memory = true;
    if (await act("POST", sbPath(ref, "/checkpoints"), req)) { take.reset(); load(); }
  } }, el("input", { name: "label", placeholder: "label", id: "ck-label" }),
  el("label", {}, el("input", { type: "checkbox", name: "memory" }), " with memory"),
  el("button", { type: "submit", id: "ck-take" }, "Take checkpoint"));
  const load = async () => {
    const { checkpoints } = await api("GET", sbPath(ref, "/checkpoints"));
    list.replaceChildren(...checkpoints.map((c) => el("tr", { dataset: { id: c.id } },
      el("td", {}, c.id), el("td", {}, c.label || ""), el("td", {}, ago(c.created_at) + " ago"), el("td", { className: "num" }, bytes(c.size_bytes)), el("td", {}, c.memory ? "memory" : ""),
      el("td", {},
        el("button", { className: "restore", onclick: async () => { if (await act("POST", sbPath(ref, "/restore"), { checkpoint: c.id })) load(); } }, "Restore"), " ",
        el("button", { onclick: async () => {
          const name = prompt("Name of the new sandbox");
          if (name && await act("POST", sbPath(ref, "/fork"), { checkpoint: c.id, name })) location.hash = "#/";
        } }, "Fork"), " ",
        el("button", { onclick: async () => { if (confirm("Delete checkpoint " + c.id + "?")) { await act("DELETE", sbPath(ref, "/checkpoints/" + encodeURIComponent(c.id))); load(); } } }, "Delete")))));
  };
  pane.replaceChildren(take, el("table", {}, el("thead", {}, el("tr", {}, ["Checkpoint", "Label", "Taken", "Size", "", ""].map((h) => el("th", {}, h)))), list));
  load().catch(showError);
  return () => {};
}

function urlsPane(ref, pane) {
  const list = el("tbody", {});
  pane.replaceChildren(el("p", { className: "muted" }, "Listening ports and their URLs (private to your token unless public)."),
    el("table", {}, el("thead", {}, el("tr", {}, ["Port", "Listening", "Public", "URL"].map((h) => el("th", {}, h)))), list));
  return every(3000, async () => {
    const { ports } = await api("GET", sbPath(ref, "/ports"));
    list.replaceChildren(...ports.map((p) => el("tr", {}, el("td", {}, p.port), el("td", {}, p.listening ? (p.address || "yes") : "no"), el("td", {}, p.public ? "yes" : "no"),
      el("td", {}, el("a", { href: p.url, target: "_blank", rel: "noopener noreferrer" }, p.url)))));
  });
}

// --- what the token may see of its tenancy (the API decides) ---

function resources(r) {
  if (!r) return "—";
  return (r.millicpu / 1000) + " CPU, " + bytes(r.memory_bytes) + " memory, " + bytes(r.disk_bytes) + " disk";
}

function tableOf(headers, rows, id) {
  return el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))), el("tbody", { id: id || "" }, rows));
}

function limitsView() {
  view.replaceChildren(el("h1", {}, "Limits"));
  api("GET", "/v1/limits").then((l) => {
    const rows = [
      ["Who", l.tenant + (l.agent ? " / " + l.agent : "") + " (" + l.role + ")"],
      ["Sandboxes", l.sandboxes ? l.sandboxes.used + " of " + l.sandboxes.limit : "no quota"],
      ["Budget used", l.budget ? resources(l.budget.used) + " of " + resources(l.budget.limit) : "no budget"],
      ["Allocation", resources(l.allocation)],
      ["Longest TTL", String(l.max_ttl)],
      ["Create rate", l.create_rate ? JSON.stringify(l.create_rate) : "—"],
    ].map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v)));
    view.append(el("table", { id: "limits" }, el("tbody", {}, rows)));
  }).catch(showError);
  return () => {};
}

// limitsOf is GET /v1/limits of tenant (and agent), or null when the
// token may not read them.
function limitsOf(tenant, agent) {
  const q = new URLSearchParams({ tenant });
  if (agent) q.set("agent", agent);
  return api("GET", "/v1/limits?" + q.toString()).catch(() => null);
}

function tenantsView() {
  view.replaceChildren(el("h1", {}, "Tenants"));
  api("GET", "/v1/tenants").then(async ({ tenants }) => {
    const limits = await Promise.all(tenants.map((t) => limitsOf(t.name)));
    view.append(tableOf(["Tenant", "Budget used", "Allocation", "Pool", "Created"], tenants.map((t, i) => el("tr", { dataset: { tenant: t.name } },
      el("td", {}, t.name),
      el("td", {}, limits[i] && limits[i].budget ? resources(limits[i].budget.used) + " of " + resources(limits[i].budget.limit) : "—"),
      el("td", {}, resources(t.allocation)), el("td", {}, t.pool || "—"), el("td", {}, ago(t.created_at) + " ago"))), "tenants"));
  }).catch(showError);
  return () => {};
}

function agentsView() {
  view.replaceChildren(el("h1", {}, "Agents"));
  api("GET", "/v1/agents").then(async ({ agents }) => {
    const limits = await Promise.all(agents.map((a) => limitsOf(a.tenant, a.name)));
    view.append(tableOf(["Agent", "Tenant", "Sandboxes", "Breaker", "Created"], agents.map((a, i) => {
      const l = limits[i];
      const rate = l && l.create_rate;
      return el("tr", { dataset: { agent: a.tenant + "/" + a.name } },
        el("td", {}, a.name), el("td", {}, a.tenant),
        el("td", {}, l && l.sandboxes ? l.sandboxes.used + " of " + l.sandboxes.limit : "—"),
        el("td", {}, rate ? rate.breaker + (rate.until ? " until " + new Date(rate.until).toLocaleTimeString() : "") + " · " + rate.recent + " recent creates" : "—"),
        el("td", {}, ago(a.created_at) + " ago"));
    }), "agents"));
  }).catch(showError);
  return () => {};
}

function tokensView() {
  const list = el("tbody", { id: "tokens" });
  const secret = el("div", { id: "new-token", className: "card", hidden: true });
  const form = el("form", { className: "inline", onsubmit: async (ev) => {
    ev.preventDefault();
    const req = { agent: form.elements.agent.value.trim() };
    if (form.elements.tenant.value.trim()) req.tenant = form.elements.tenant.value.trim();
    if (form.elements.role.value) req.role = form.elements.role.value;
    if (form.elements.ttl.value.trim()) req.ttl = form.elements.ttl.value.trim();
    const made = await act("POST", "/v1/tokens", req);
    if (!made) return;
    secret.hidden = false;
    secret.replaceChildren(el("div", {}, "The new token, shown this once:"), el("code", { id: "token-secret" }, made.token));
    form.reset();
    load();
  } }, el("input", { name: "agent", placeholder: "agent", id: "token-agent" }), el("input", { name: "tenant", placeholder: "tenant (operators)", id: "token-tenant" }),
  el("select", { name: "role" }, el("option", { value: "" }, "agent"), el("option", { value: "tenant-admin" }, "tenant admin"), el("option", { value: "operator" }, "operator")),
  el("input", { name: "ttl", placeholder: "ttl, e.g. 24h", size: 10 }), el("button", { type: "submit", id: "token-create" }, "Create token"));
  const load = async () => {
    const { tokens } = await api("GET", "/v1/tokens");
    list.replaceChildren(...tokens.map((k) => el("tr", { dataset: { id: k.id } },
      el("td", {}, k.id), el("td", {}, k.tenant), el("td", {}, k.agent || "—"), el("td", {}, k.role), el("td", {}, k.name_prefix || ""),
      el("td", {}, ago(k.created_at) + " ago"), el("td", {}, k.revoked_at ? "revoked" : k.expires_at ? "expires in " + left(k.expires_at) : "—"),
      el("td", {}, k.revoked_at ? null : el("button", { className: "revoke", onclick: async () => {
        if (confirm("Revoke token " + k.id + "?")) { await act("DELETE", "/v1/tokens/" + encodeURIComponent(k.id)); load(); }
      } }, "Revoke")))));
  };
  view.replaceChildren(el("h1", {}, "Tokens"), form, secret,
    el("table", {}, el("thead", {}, el("tr", {}, ["Token", "Tenant", "Agent", "Role", "Prefix", "Created", "State", ""].map((h) => el("th", {}, h)))), list));
  load().catch(showError);
  return () => {};
}

// goneView is why the sandboxes the token could see went.
function goneView() {
  view.replaceChildren(el("h1", {}, "Gone sandboxes"), el("p", { className: "muted" }, "Why each sandbox went, kept for 7 days."));
  api("GET", "/v1/gone").then(({ gone }) => {
    view.append(tableOf(["Sandbox", "Owner", "Gone", "Why", "Status before"], gone.map((g) => el("tr", {},
      el("td", {}, g.tenant + "/" + g.name), el("td", {}, g.owner), el("td", {}, ago(g.at) + " ago"),
      el("td", {}, g.reason), el("td", { className: "reason" }, g.last_status || ""))), "gone"));
  }).catch(showError);
  return () => {};
}

// auditView is the audit log, filtered as the API filters it; "alarms
// only" keeps the create-rate alarms and breaker trips.
function auditView() {
  const list = el("tbody", { id: "audit" });
  const form = el("form", { className: "inline", onsubmit: (ev) => { ev.preventDefault(); load().catch(showError); } },
    el("input", { name: "since", value: "1h", size: 8, title: "a duration back from now, or an RFC 3339 time" }),
    el("input", { name: "tenant", placeholder: "tenant" }), el("input", { name: "agent", placeholder: "agent" }),
    el("label", {}, el("input", { type: "checkbox", name: "alarms", id: "alarms-only" }), " alarms only"),
    el("button", { type: "submit", id: "audit-show" }, "Show"));
  const load = async () => {
    const q = new URLSearchParams();
    for (const k of ["since", "tenant", "agent"]) if (form.elements[k].value.trim()) q.set(k, form.elements[k].value.trim());
    const { events } = await api("GET", "/v1/audit?" + q.toString());
    const shown = form.elements.alarms.checked ? events.filter((e) => e.verb.startsWith("alarm.")) : events;
    list.replaceChildren(...shown.slice(-500).reverse().map((e) => el("tr", {},
      el("td", {}, new Date(e.at).toLocaleString()), el("td", {}, e.door), el("td", {}, e.verb), el("td", {}, e.tenant), el("td", {}, e.agent || ""),
      el("td", {}, e.sandbox || ""), el("td", {}, e.code || "ok"), el("td", { className: "num" }, e.status), el("td", { className: "num" }, e.duration_ms + " ms"))));
  };
  view.replaceChildren(el("h1", {}, "Audit log"), form,
    el("table", {}, el("thead", {}, el("tr", {}, ["At", "Door", "Verb", "Tenant", "Agent", "Sandbox", "Code", "Status", "Took"].map((h) => el("th", {}, h)))), list));
  load().catch(showError);
  return () => {};
}

// --- routing ---

function route() {
  stopView();
  if (!token()) {
    if (location.hash !== "#/login") { location.hash = "#/login"; return; }
  }
  document.getElementById("signout").hidden = !token();
  document.getElementById("nav").hidden = !token();
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const pages = { limits: limitsView, tenants: tenantsView, agents: agentsView, tokens: tokensView, audit: auditView, gone: goneView };
  if (parts[0] === "login") stopView = loginView();
  else if (pages[parts[0]]) stopView = pages[parts[0]]();
  else if (parts[0] === "sb" && parts[1]) stopView = sandboxView(decodeURIComponent(parts[1]), parts[2] || "terminal");
  else stopView = listView();
}

document.getElementById("signout").addEventListener("click", () => {
  sessionStorage.removeItem(tokenKey);
  location.hash = "#/login";
});
window.addEventListener("hashchange", route);
route();
