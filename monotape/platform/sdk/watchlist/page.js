// The watchlist page (GET /watchlist on the admin server): the terminal SDK on a trader's
// screen. Thin on purpose: the client, its view and guard are the SDK's (/watchlist/sdk/), the
// decisions of the page are board.js's; this module only moves them onto the DOM.
//
// Painting is batched per animation frame: 200 symbols at 25 Hz are 5,000 quotes a second, and
// a DOM write per quote is what makes a watchlist stutter (bench/e2e/bench_page.py measures the
// two against each other). Each frame paints only the lines `view.takeChanged()` names, and a
// cell is written only when its text changes.

import { TerminalClient, formatPrice } from "/watchlist/sdk/index.js";
import { RateMeter, badge, searchKeys, staleLabel, versionText } from "./board.js";

// How the token travels: in the subprotocol list (a node of issue 15) or, for an older node,
// the URL (?token=, which gets logged: avoid it).
const TOKEN_IN = new URLSearchParams(location.search).get("tokenIn") === "query" ? "query" : "subprotocol";
const RESULTS = 50; // search results listed
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));

/** @type {TerminalClient | null} */
let client = null;
/** @type {Map<string, {el: HTMLElement, cells: Record<string, HTMLElement>, text: Record<string, string>, tone: Record<string, string>, bid: bigint | null, ask: bigint | null}>} */
const rows = new Map();
let ticket = /** @type {string | null} */ (null);
let lastShown = /** @type {{epoch: bigint, seq: bigint, at: number} | null} */ (null);
const meter = new RateMeter(2000);

async function json(response) {
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error ?? `HTTP ${response.status}`);
  return body;
}

/** A fresh terminal token from the dev sign-in (the node mints it; nothing is stored). */
async function devToken(name) {
  const body = await json(
    await fetch("/watchlist/token", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ name }),
      cache: "no-store",
    }),
  );
  return body.token;
}

async function start() {
  const cfg = await json(await fetch("/watchlist/config", { cache: "no-store" }));
  $("signin").hidden = false;
  $("signin-dev").hidden = !cfg.dev_sign_in;
  $("signin-token").hidden = !cfg.auth || cfg.dev_sign_in;
  const remembered = localStorage.getItem("monotape.watchlist.name"); // the name, never a token
  if (remembered) /** @type {HTMLInputElement} */ ($("name")).value = remembered;
  $("signin").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    $("signin-error").textContent = "";
    try {
      await signIn(cfg);
    } catch (e) {
      $("signin-error").textContent = String(e.message ?? e);
    }
  });
  $("signout").addEventListener("click", signOut);
  $("rows").addEventListener("click", onRowClick);
  $("search").addEventListener("input", showResults);
  $("search").addEventListener("keydown", (ev) => ev.key === "Escape" && ((/** @type {HTMLInputElement} */ (ev.target).value = ""), showResults()));
  $("add-matching").addEventListener("click", () => add(matching(room())));
  $("rate").addEventListener("change", (ev) => client?.setMaxHz(Number(/** @type {HTMLSelectElement} */ (ev.target).value)).catch(note));
  setInterval(paintStatus, 250);
  requestAnimationFrame(paint);
}

async function signIn(cfg) {
  let tokenProvider;
  let refreshToken;
  let who = "";
  if (cfg.dev_sign_in) {
    const name = /** @type {HTMLInputElement} */ ($("name")).value.trim();
    let first = await devToken(name); // a bad name is refused here, with the node's reason
    localStorage.setItem("monotape.watchlist.name", name);
    tokenProvider = async () => (first ? ((t) => ((first = null), t))(first) : devToken(name));
    refreshToken = () => devToken(name);
    who = name;
  } else if (cfg.auth) {
    const input = /** @type {HTMLInputElement} */ ($("token"));
    const token = input.value.trim();
    input.value = "";
    if (!token) throw new Error("paste a terminal token");
    tokenProvider = () => token;
    who = "token";
  }
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const url = new URLSearchParams(location.search).get("ws") ?? `${scheme}://${location.hostname}:${cfg.ws_port}/`;
  client = new TerminalClient(url, { WebSocket, tokenProvider, refreshToken, tokenIn: TOKEN_IN, onState: paintStatus });
  // for tests, benches and a person at the console: the client and the page's two actions
  Object.assign(window, { watchlist: { client, add, setTicket, rows } });
  $("signin").hidden = true;
  $("desk").hidden = false;
  $("signout").hidden = false;
  $("who").textContent = who;
  await client.connect();
  showResults();
}

function signOut() {
  client?.close();
  client = null;
  for (const r of rows.values()) r.el.remove();
  rows.clear();
  ticket = null;
  lastShown = null;
  $("desk").hidden = true;
  $("signout").hidden = true;
  $("signin").hidden = false;
  $("who").textContent = "";
  paintStatus();
}

function note(e) {
  client?.stats.note(String(e?.message ?? e));
}

// -- picking symbols -----------------------------------------------------------------------------

const dictionary = () => client?.view.hello?.instruments.map((i) => i.key) ?? [];
const room = () => Math.max(0, (client?.view.hello?.max_subscriptions ?? 256) - (client?.view.held.size ?? 0));

function matching(limit) {
  const q = /** @type {HTMLInputElement} */ ($("search")).value;
  return searchKeys(dictionary(), q, limit + (client?.view.held.size ?? 0)).filter((k) => !client?.view.held.has(k)).slice(0, limit);
}

function showResults() {
  const list = $("results");
  const q = /** @type {HTMLInputElement} */ ($("search")).value;
  list.replaceChildren();
  if (!q.trim() || !client) return;
  for (const key of searchKeys(dictionary(), q, RESULTS)) {
    const li = document.createElement("li");
    li.textContent = key;
    li.setAttribute("role", "option");
    li.dataset.key = key;
    if (client.view.held.has(key)) li.classList.add("held");
    li.addEventListener("click", () => add([key]).then(showResults));
    list.append(li);
  }
}

/** Subscribe `keys` (in chunks the node takes); their lines appear at once, prices as they come. */
async function add(keys) {
  if (!client) return;
  keys = keys.filter((k) => !client?.view.held.has(k)).slice(0, room());
  for (const k of keys) row(k);
  for (let i = 0; i < keys.length; i += 256) {
    try {
      await client.subscribe(keys.slice(i, i + 256));
    } catch (e) {
      note(e); // refused keys are released by the client: their rows go at the next paint
    }
  }
}

async function remove(key) {
  rows.get(key)?.el.remove();
  rows.delete(key);
  if (ticket === key) ticket = null;
  await client?.unsubscribe([key]).catch(note);
}

/** One symbol in the order ticket: its every update, unconflated (priority). */
async function setTicket(key) {
  if (!client) return;
  const before = ticket;
  ticket = before === key ? null : key;
  for (const [k, r] of rows) r.el.classList.toggle("ticket", k === ticket);
  try {
    if (before) await client.setPriority([before], false);
    if (ticket) await client.setPriority([ticket], true);
  } catch (e) {
    note(e);
  }
}

// -- painting ------------------------------------------------------------------------------------

const COLUMNS = ["bid", "ask", "last", "size", "version"];

/** A line of the list (a grid row of spans: see watchlist.css on why not a table). */
function row(key) {
  let r = rows.get(key);
  if (r) return r;
  const el = document.createElement("div");
  el.className = "line";
  el.setAttribute("role", "row");
  el.dataset.key = key;
  const sym = document.createElement("span");
  sym.setAttribute("role", "cell");
  sym.textContent = key;
  const since = document.createElement("span"); // "stale since ...": empty while live
  since.className = "since";
  sym.append(since);
  el.append(sym);
  const cells = {};
  const text = {};
  const tone = {};
  for (const c of COLUMNS) {
    const cell = document.createElement("span");
    cell.setAttribute("role", "cell");
    cell.className = "num";
    cell.dataset.col = c;
    cell.append(document.createTextNode("-"));
    cells[c] = cell;
    text[c] = "-";
    tone[c] = "num";
    el.append(cell);
  }
  const mark = document.createElement("button");
  mark.type = "button";
  mark.className = "mark";
  mark.textContent = "ticket";
  mark.title = "in my order ticket: every update, unconflated";
  const drop = document.createElement("button");
  drop.type = "button";
  drop.className = "drop";
  drop.textContent = "×";
  drop.title = "remove";
  drop.setAttribute("aria-label", `remove ${key}`);
  el.append(mark, drop);
  $("rows").append(el);
  r = { el, cells, text, tone, bid: null, ask: null, since, staleText: "" };
  rows.set(key, r);
  return r;
}

// one listener for every line's buttons, not two per line
function onRowClick(ev) {
  const button = /** @type {HTMLElement} */ (ev.target).closest("button");
  const key = button?.closest(".line")?.getAttribute("data-key");
  if (!button || !key) return;
  if (button.classList.contains("mark")) void setTicket(key);
  else if (button.classList.contains("drop")) void remove(key);
}

function put(r, column, value, tone) {
  if (r.text[column] !== value) {
    r.text[column] = value;
    /** @type {Text} */ (r.cells[column].firstChild).nodeValue = value;
  }
  if (tone !== undefined && r.tone[column] !== tone) {
    r.tone[column] = tone;
    r.cells[column].className = tone;
  }
}

/** Write `text` to `id` only when it differs: a write costs a layout even when nothing changed. */
const shown = new Map();
function setText(id, text) {
  if (shown.get(id) === text) return;
  shown.set(id, text);
  $(id).textContent = text;
}

const toneOf = (now, before) => (before === null || now === before ? undefined : now > before ? "num up" : "num down");

/** Once per animation frame: only the lines that changed, only the cells whose text changed. */
function paint() {
  requestAnimationFrame(paint);
  const view = client?.view;
  if (!view) return;
  for (const key of view.takeChanged()) {
    if (!view.held.has(key)) {
      rows.get(key)?.el.remove();
      rows.delete(key);
      continue;
    }
    const q = view.quotes.get(key);
    if (q === undefined) continue;
    const r = row(key);
    put(r, "bid", formatPrice(q.bid, q.decimals), toneOf(q.bid, r.bid));
    put(r, "ask", formatPrice(q.ask, q.decimals), toneOf(q.ask, r.ask));
    put(r, "last", formatPrice(q.last, q.decimals), q.direction > 0 ? "num up" : q.direction < 0 ? "num down" : undefined);
    put(r, "size", String(q.size));
    put(r, "version", versionText(q.epoch, q.seq));
    r.bid = q.bid;
    r.ask = q.ask;
    if (lastShown === null || q.at >= lastShown.at) lastShown = q;
  }
}

/** The header, four times a second: badge, frames/s, the last version, what the guard dropped. */
function paintStatus() {
  const now = performance.now();
  const b = badge({
    state: client?.state ?? "idle",
    now,
    lastMessageAt: client?.conn?.lastMessageAt ?? null,
    nextAttemptAt: client?.stats.nextAttemptAt ?? null,
  });
  setText("badge", b.text);
  if (document.body.dataset.badge !== b.tone) {
    document.body.dataset.badge = b.tone;
    $("badge").className = `badge ${b.tone}`;
  }
  if (!client) return;
  const s = client.view.stats;
  setText("fps", meter.sample(s.frames, now).toFixed(0));
  setText("frame-no", s.lastFrameNo === null ? "-" : String(s.lastFrameNo));
  setText("last-version", lastShown ? versionText(lastShown.epoch, lastShown.seq) : "-");
  setText("regressions", String(s.regressions));
  const tone = s.regressions ? "bad" : "zero";
  if ($("regressions").className !== tone) $("regressions").className = tone;
  setText("gaps", String(s.gaps));
  setText("stale", String(s.stale));
  setText("held", `${client.view.held.size} of ${client.view.hello?.max_subscriptions ?? "-"} symbols`);
  if ($("empty").hidden !== rows.size > 0) $("empty").hidden = rows.size > 0;
  setText("log", client.stats.log.slice(-6).join("\n"));
  paintStale(client.view);
}

/** Grey every stale line and say since when; the next record that clears it un-greys it. */
function paintStale(view) {
  const wall = Date.now();
  for (const [key, r] of rows) {
    const since = view.staleSince(key);
    const label = since === null ? "" : staleLabel(since, wall);
    if (r.staleText === label) continue;
    r.staleText = label;
    r.since.textContent = label;
    r.el.classList.toggle("stale", since !== null);
  }
}

start().catch((e) => ($("signin-error").textContent = String(e.message ?? e)));
