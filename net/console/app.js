// kiln's ops console: reads the admin API with the key kept in this tab's session storage,
// draws the live figures from /admin/console/events, and acts through admin calls.
'use strict';

const KEY = 'kiln.admin_key';
const $ = (id) => document.getElementById(id);
let feed = null;       // the events stream's reader
let refreshTimer = null;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k === undefined || k === null ? '' : String(k)));
  return e;
}

async function api(method, path, body) {
  const headers = { Authorization: 'Bearer ' + sessionStorage.getItem(KEY) };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* not JSON */ }
  if (!r.ok) throw new Error((json && json.error && json.error.message) || r.status + ' ' + r.statusText);
  return json;
}

function notice(text, bad) {
  const n = $('notice');
  n.textContent = text;
  n.className = bad ? 'error' : '';
}

async function act(what, method, path, body) {
  try {
    await api(method, path, body);
    notice(what + ': done');
  } catch (e) {
    notice(what + ': ' + e.message, true);
  }
  refresh();
}

// --- charts: the last two minutes of each figure ---
const series = { tps: [], ttft: [], hit: [] };
function draw(id, points, fmt) {
  const c = $(id), g = c.getContext('2d');
  g.clearRect(0, 0, c.width, c.height);
  const vals = points.filter((v) => v >= 0);
  const top = Math.max(1e-9, ...vals) * 1.1;
  g.strokeStyle = '#d9dee3';
  g.beginPath(); g.moveTo(0, c.height - 0.5); g.lineTo(c.width, c.height - 0.5); g.stroke();
  g.strokeStyle = '#c2410c'; g.lineWidth = 2; g.beginPath();
  let started = false;
  points.forEach((v, i) => {
    if (v < 0) { started = false; return; }
    const x = (i / Math.max(1, points.length - 1)) * c.width, y = c.height - (v / top) * (c.height - 6) - 3;
    if (started) g.lineTo(x, y); else { g.moveTo(x, y); started = true; }
  });
  g.stroke();
  g.fillStyle = '#66707a'; g.font = '11px system-ui';
  g.fillText(fmt(top / 1.1), 4, 12);
}
function push(name, v) {
  series[name].push(v);
  if (series[name].length > 120) series[name].shift();
}
function onEvent(ev) {
  if (ev.hello) return;
  push('tps', ev.tokens_per_s);
  push('ttft', ev.ttft_p95_ms);
  push('hit', ev.hit_rate);
  $('now-tps').textContent = ev.tokens_per_s.toFixed(0);
  $('now-ttft').textContent = ev.ttft_p95_ms >= 0 ? ev.ttft_p95_ms.toFixed(0) : '–';
  $('now-hit').textContent = ev.hit_rate >= 0 ? (100 * ev.hit_rate).toFixed(0) + '%' : '–';
  draw('chart-tps', series.tps, (v) => v.toFixed(0));
  draw('chart-ttft', series.ttft, (v) => v.toFixed(0) + ' ms');
  draw('chart-hit', series.hit, (v) => (100 * v).toFixed(0) + '%');
  renderPools(ev.pools);
}

// Server-sent events over fetch, which can carry the Authorization header.
async function follow() {
  const r = await fetch('/admin/console/events', { headers: { Authorization: 'Bearer ' + sessionStorage.getItem(KEY) } });
  if (!r.ok || !r.body) throw new Error('events: ' + r.status);
  feed = r.body.getReader();
  $('live').classList.add('on');
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await feed.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of block.split('\n'))
        if (line.startsWith('data: ')) { try { onEvent(JSON.parse(line.slice(6))); } catch (e) { /* a bad event */ } }
    }
  }
  $('live').classList.remove('on');
}
function keepFollowing() {
  follow().catch(() => {}).finally(() => {
    $('live').classList.remove('on');
    if (sessionStorage.getItem(KEY)) setTimeout(keepFollowing, 2000);
  });
}

// --- tables ---
function cls(state) { return 'state-' + String(state).replace(/[^a-z_]/g, ''); }

function renderPools(pools) {
  const body = $('pools').tBodies[0];
  body.replaceChildren();
  for (const p of pools || []) {
    const q = p.queues || {};
    const reps = p.replicas.length ? p.replicas : [null];
    reps.forEach((r, i) => {
      const row = el('tr', { 'data-replica': r ? r.replica_id : '' });
      if (i === 0) {
        row.append(el('td', { rowspan: reps.length }, p.model + '@' + p.version),
                   el('td', { rowspan: reps.length, class: cls(p.status) }, p.status),
                   el('td', { rowspan: reps.length }, [q.interactive || 0, q.standard || 0, q.batch || 0].join(' / ')));
      }
      if (!r) { row.append(el('td', { colspan: 7 }, 'no replicas')); body.append(row); return; }
      const drainPath = '/admin/replicas/' + encodeURIComponent(r.replica_id) + '/drain';
      const out = ['draining', 'stopped', 'failed'].includes(r.state);  // drained: it can be resumed
      const actions = el('td', {},
        out ? el('button', { class: 'resume', onclick: () => act('Resume ' + r.replica_id, 'DELETE', drainPath) }, 'Resume')
            : el('button', { class: 'drain', onclick: () => act('Drain ' + r.replica_id, 'PUT', drainPath) }, 'Drain'),
        ' ',
        el('button', { class: 'danger kill', onclick: () => {
          if (confirm('Kill replica ' + r.replica_id + '?'))
            act('Kill ' + r.replica_id, 'POST', '/admin/chaos', { target: 'replica', id: r.replica_id, action: 'kill' });
        } }, 'Kill'));
      row.append(el('td', {}, r.replica_id), el('td', { class: 'state ' + cls(r.state) }, r.state),
                 el('td', { class: 'num' }, r.running ?? ''), el('td', { class: 'num' }, r.waiting ?? ''),
                 el('td', { class: 'num' }, r.tokens_in_flight ?? ''),
                 el('td', { class: 'num' }, r.kv_total ? r.kv_free + ' / ' + r.kv_total : ''), actions);
      body.append(row);
    });
  }
}

function renderTeams(teams, models) {
  const body = $('teams').tBodies[0];
  body.replaceChildren();
  for (const t of teams) {
    const limits = t.limits.map((l) => l.model + ': ' + (l.tokens_per_minute || '∞') + ' tok/min' +
      (l.max_concurrency ? ', ' + l.max_concurrency + ' at once' : '') + (l.guaranteed_share ? ', share ' + l.guaranteed_share : ''));
    const used = t.usage.map((u) => u.model + ': ' + u.requests + ' req, ' + u.prompt_tokens + ' in, ' + u.output_tokens + ' out' + (u.shed ? ', ' + u.shed + ' shed' : ''));
    const model = el('select', {}, ...models.map((m) => el('option', { value: m }, m)));
    const tpm = el('input', { class: 'limit', type: 'number', min: '0', placeholder: 'tokens/min' });
    const save = el('button', { class: 'save-limit', onclick: () => {
      if (tpm.value === '') return notice('Give the tokens per minute first', true);
      const current = t.limits.find((l) => l.model === model.value) || {};
      act('Limit of ' + t.team, 'PUT', '/admin/teams/' + encodeURIComponent(t.team) + '/limits',
          { ...current, model: model.value, tokens_per_minute: Number(tpm.value) });
    } }, 'Save');
    body.append(el('tr', { 'data-team': t.team }, el('td', {}, t.team), el('td', {}, t.max_priority),
      el('td', { class: 'limits' }, limits.join('; ') || 'none'), el('td', {}, used.join('; ') || 'none'),
      el('td', {}, model, ' ', tpm, ' ', save)));
  }
}

function renderBatches(batches) {
  const body = $('batches').tBodies[0];
  body.replaceChildren();
  if (!batches.length) body.append(el('tr', {}, el('td', { colspan: 8 }, 'no batches')));
  for (const b of batches) {
    const c = b.request_counts;
    body.append(el('tr', {}, el('td', {}, b.id), el('td', {}, b.team), el('td', {}, b.model), el('td', { class: cls(b.status) }, b.status),
      el('td', { class: 'num' }, c.completed), el('td', { class: 'num' }, c.failed), el('td', { class: 'num' }, c.total),
      el('td', {}, new Date(b.created_at * 1000).toLocaleString())));
  }
}

async function renderRollouts(models) {
  const box = $('rollouts');
  const views = await Promise.all(models.map((m) => api('GET', '/admin/models/' + encodeURIComponent(m) + '/rollout').catch(() => null)));
  box.replaceChildren();
  views.forEach((v, i) => {
    if (!v) return;
    const m = models[i];
    const parts = [el('b', {}, m), ' live ', el('code', {}, v.live)];
    if (v.canary && v.canary.version) parts.push(', canary ', el('code', {}, v.canary.version), ' at ' + v.canary.percent + '%');
    if (v.shadow && v.shadow.version) parts.push(', shadow ', el('code', {}, v.shadow.version), ' at ' + v.shadow.percent + '%');
    if (v.previous) parts.push(', previous ', el('code', {}, v.previous));
    const buttons = [];
    if (v.canary && v.canary.version)
      buttons.push(el('button', { class: 'promote', onclick: () => act('Promote ' + v.canary.version, 'PUT', '/admin/models/' + m + '/alias', { version: v.canary.version }) }, 'Promote canary'),
                   el('button', { class: 'danger rollback', onclick: () => act('Roll back ' + v.canary.version, 'PUT', '/admin/models/' + m + '/rollout', { version: v.canary.version, stage: 'canary', percent: 0 }) }, 'Roll back canary'));
    else if (v.previous)
      buttons.push(el('button', { class: 'danger rollback', onclick: () => act('Roll back to ' + v.previous, 'PUT', '/admin/models/' + m + '/alias', { version: v.previous }) }, 'Roll back to ' + v.previous));
    const w = v.window || {};
    const stats = (k, x) => k + ': ' + x.requests + ' requests, errors ' + (100 * x.error_rate).toFixed(1) + '%, p95 TTFT ' +
      (1000 * x.ttft_p95_s).toFixed(0) + ' ms, mean output ' + Number(x.mean_output).toFixed(0);
    const guard = ['live', 'canary'].filter((k) => w[k] && (k === 'live' || (v.canary && v.canary.version))).map((k) => stats(k, w[k]));
    const list = el('ul', {}, ...(v.decisions || []).slice(-5).reverse().map((d) =>
      el('li', {}, d.decision + ' ' + d.version + ' (' + d.stage + ' ' + d.percent + '%): ' + d.reason)));
    box.append(el('div', { class: 'rollout', 'data-model': m }, ...parts, ' ', ...buttons,
      el('div', { class: 'guard' }, guard.join(' · ')), list));
  });
}

async function refresh() {
  try {
    const s = await api('GET', '/admin/console/state');
    $('where').textContent = 'region ' + s.region + (s.node ? ' · node ' + s.node : '');
    renderPools(s.pools);
    renderTeams(s.teams, s.models);
    renderBatches(s.batches);
    await renderRollouts(s.models);
  } catch (e) {
    notice('Cannot read the state: ' + e.message, true);
  }
}

function show(loggedIn) {
  $('login').hidden = loggedIn;
  $('console').hidden = !loggedIn;
  $('logout').hidden = !loggedIn;
}

async function start() {
  try {
    await api('GET', '/admin/console/state');
  } catch (e) {
    sessionStorage.removeItem(KEY);
    show(false);
    $('login-error').textContent = 'Not logged in: ' + e.message;
    return;
  }
  show(true);
  await refresh();
  clearInterval(refreshTimer);
  refreshTimer = setInterval(refresh, 3000);
  keepFollowing();
}

$('login-form').addEventListener('submit', (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY, $('key').value);
  $('key').value = '';
  start();
});
$('logout').addEventListener('click', () => {
  sessionStorage.removeItem(KEY);
  clearInterval(refreshTimer);
  if (feed) feed.cancel();
  show(false);
});
if (sessionStorage.getItem(KEY)) start(); else show(false);
