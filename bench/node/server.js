'use strict';
// Node + ws fan-out peers for bench/bench_fanout.py, on the same workload as the Python variants.
//
//   node bench/node/server.js --variant json|shared --workload FILE --connections N
//        --seconds S --warmup W --setup-timeout T
//
// The workload file (written by bench_fanout.py) holds the instruments (keys, price decimals) and
// the pre-generated frames: per frame, the changed ticks as [iid, seq, bid, ask, last, size]
// (scaled integers; epoch is always 1). Each connection's watchlist comes from the client's one
// binary msgpack Subscribe ({type: "subscribe", req, keys}), exactly as for the Python servers.
//
// - json   (node-ws-json, the seed team's first version): per frame, per connection, the changed
//          symbols of its watchlist through JSON.stringify and ws.send().
// - shared (node-ws-shared, the seed's final shape): connections grouped by watchlist; per frame,
//          per group with a change, one JSON.stringify, one frame built once with ws's
//          Sender.frame, and the same Buffer written with socket.write() to each connection's
//          raw socket.
//
// Protocol with the driver (stdout, one JSON object per line), as the Python servers:
//   {"port"} once listening; {"window": [t_start, t_end], "subscribed"} when every connection has
//   subscribed (or the setup timeout passed) and frames start; the result after the window:
//   cpu_s (process.cpuUsage: user+system, every thread), wall_s, delivered, bytes, frames, ...
// Times are CLOCK_MONOTONIC seconds (process.hrtime uses it on Linux), like Python's
// time.monotonic(), so the client measures over the same window.

const fs = require('fs');
const { WebSocketServer, Sender } = require('ws');
const { decode } = require('@msgpack/msgpack');

const FRAME_NS = 40000000n;

function parseArgs(argv) {
  const a = {
    variant: 'json', workload: '', connections: 1000, seconds: 10, warmup: 3, setupTimeout: 60,
  };
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i];
    const v = argv[i + 1];
    if (k === '--variant') a.variant = v;
    else if (k === '--workload') a.workload = v;
    else if (k === '--connections') a.connections = Number(v);
    else if (k === '--seconds') a.seconds = Number(v);
    else if (k === '--warmup') a.warmup = Number(v);
    else if (k === '--setup-timeout') a.setupTimeout = Number(v);
    else throw new Error(`unknown argument ${k}`);
  }
  if (a.variant !== 'json' && a.variant !== 'shared') throw new Error(`bad variant ${a.variant}`);
  return a;
}

const args = parseArgs(process.argv.slice(2));
const emit = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
const monoS = () => Number(process.hrtime.bigint()) / 1e9;

const work = JSON.parse(fs.readFileSync(args.workload, 'utf8'));
const keys = work.keys;
const scale = work.decimals.map((d) => 10 ** d);
const iidOf = new Map(keys.map((k, i) => [k, i]));
const frames = work.frames;
const latest = new Array(keys.length).fill(undefined);

// --- connections -----------------------------------------------------------------------------

let nextId = 0;
let subscribed = 0;
const conns = new Map(); // json: id -> {ws, iids}
const groups = new Map(); // shared: watchlist signature -> {iids, conns: Set<{ws, socket}>}

function onSubscribe(id, ws, iids) {
  if (conns.has(id)) return; // one watchlist per connection, as the Python variants
  if (args.variant === 'json') {
    conns.set(id, { ws, iids });
  } else {
    const sig = iids.join(',');
    let g = groups.get(sig);
    if (g === undefined) {
      g = { iids, conns: new Set() };
      groups.set(sig, g);
    }
    const c = { ws, socket: ws._socket, group: g };
    g.conns.add(c);
    conns.set(id, c);
  }
  subscribed += 1;
}

function onClose(id) {
  const c = conns.get(id);
  if (c === undefined) return;
  conns.delete(id);
  subscribed -= 1;
  if (c.group !== undefined) {
    c.group.conns.delete(c);
    if (c.group.conns.size === 0) groups.delete(c.group.iids.join(','));
  }
}

const wss = new WebSocketServer({
  host: '127.0.0.1', port: 0, backlog: 2048, perMessageDeflate: false, clientTracking: false,
});
wss.on('connection', (ws) => {
  const id = nextId++;
  ws.on('message', (data, isBinary) => {
    if (!isBinary) return;
    let req;
    try {
      req = decode(data);
    } catch {
      return;
    }
    if (req === null || typeof req !== 'object' || req.type !== 'subscribe') return;
    if (!Array.isArray(req.keys)) return;
    const set = new Set();
    for (const k of req.keys) {
      const i = iidOf.get(k);
      if (i !== undefined) set.add(i);
    }
    onSubscribe(id, ws, [...set].sort((x, y) => x - y));
  });
  ws.on('close', () => onClose(id));
  ws.on('error', () => {});
});
wss.on('error', (err) => {
  process.stderr.write(`server error: ${err}\n`);
  process.exit(2);
});

// --- fan-out ---------------------------------------------------------------------------------

let next = 0;
let sent = 0;
let sentBytes = 0;

function loadFrame() {
  const ticks = frames[next % frames.length]; // cycles only if the run outlives the plan
  next += 1;
  for (const t of ticks) {
    const iid = t[0];
    const s = scale[iid];
    latest[iid] = {
      key: keys[iid], epoch: 1, seq: t[1], bid: t[2] / s, ask: t[3] / s, last: t[4] / s, size: t[5],
    };
  }
  return ticks;
}

function clearFrame(ticks) {
  for (const t of ticks) latest[t[0]] = undefined;
}

function changed(iids) {
  const updates = [];
  for (const iid of iids) {
    const u = latest[iid];
    if (u !== undefined) updates.push(u);
  }
  return updates;
}

function stepJson(frameNo) {
  const ticks = loadFrame();
  for (const c of conns.values()) {
    const updates = changed(c.iids);
    if (updates.length === 0 || c.ws.readyState !== 1) continue;
    const text = JSON.stringify({ type: 'frame', frame: frameNo, updates });
    try {
      c.ws.send(text);
    } catch {
      continue;
    }
    const n = Buffer.byteLength(text);
    sent += 1;
    sentBytes += n + (n < 126 ? 2 : n < 65536 ? 4 : 10);
  }
  clearFrame(ticks);
}

const FRAME_OPTS = { fin: true, opcode: 1, mask: false, readOnly: false, rsv1: false };

function stepShared(frameNo) {
  const ticks = loadFrame();
  for (const g of groups.values()) {
    const updates = changed(g.iids);
    if (updates.length === 0) continue;
    const payload = Buffer.from(JSON.stringify({ type: 'frame', frame: frameNo, updates }));
    const parts = Sender.frame(payload, FRAME_OPTS);
    const wire = parts.length === 1 ? parts[0] : Buffer.concat(parts);
    for (const c of g.conns) {
      const s = c.socket;
      // The connection's own state first: never write into a closing or destroyed socket.
      if (c.ws.readyState !== 1 || s.destroyed || !s.writable) continue;
      try {
        s.write(wire);
      } catch {
        continue;
      }
      sent += 1;
      sentBytes += wire.length;
    }
  }
  clearFrame(ticks);
}

const step = args.variant === 'json' ? stepJson : stepShared;
let measuring = false;
let fanUs = 0;
let late = 0;
let stopped = false;
let lastBoundary = 0n;

function tick(boundary) {
  if (stopped) return;
  if (process.hrtime.bigint() - boundary > FRAME_NS) late += 1;
  const c0 = measuring ? process.cpuUsage() : null;
  step(Number(boundary / FRAME_NS));
  if (c0 !== null) {
    const d = process.cpuUsage(c0);
    fanUs += d.user + d.system;
  }
  lastBoundary = boundary;
  schedule();
}

function schedule() {
  const now = process.hrtime.bigint();
  let boundary = (now / FRAME_NS + 1n) * FRAME_NS;
  if (boundary <= lastBoundary) boundary = lastBoundary + FRAME_NS; // a timer that fired early
  setTimeout(tick, Number(boundary - now) / 1e6, boundary);
}

let subscribedAtStart = 0;

function measure() {
  subscribedAtStart = subscribed;
  const tStart = monoS() + args.warmup;
  const tEnd = tStart + args.seconds;
  emit({ window: [tStart, tEnd], subscribed });
  schedule();
  let c0;
  let w0;
  let d0;
  let b0;
  let n0;
  let late0;
  setTimeout(() => {
    c0 = process.cpuUsage();
    w0 = monoS();
    [d0, b0, n0, late0] = [sent, sentBytes, next, late];
    measuring = true;
    setTimeout(() => {
      const c = process.cpuUsage(c0);
      const w1 = monoS();
      measuring = false;
      stopped = true;
      emit({
        variant: `node-ws-${args.variant}`,
        connections: args.connections,
        subscribed: subscribedAtStart,
        cpu_s: (c.user + c.system) / 1e6,
        wall_s: w1 - w0,
        delivered: sent - d0,
        bytes: sentBytes - b0,
        frames: next - n0,
        late_frames: late - late0,
        feed_s: 0,
        fanout_s: fanUs / 1e6,
        groups: groups.size,
        node: process.version,
        ws: require('ws/package.json').version,
      });
      process.exit(0); // thousands of graceful closes are not part of the benchmark
    }, Math.max(0, (tEnd - monoS()) * 1000));
  }, Math.max(0, (tStart - monoS()) * 1000));
}

wss.on('listening', () => {
  emit({ port: wss.address().port });
  const deadline = monoS() + args.setupTimeout;
  const poll = setInterval(() => {
    if (subscribed >= args.connections || monoS() >= deadline) {
      clearInterval(poll);
      measure();
    }
  }, 50);
});
