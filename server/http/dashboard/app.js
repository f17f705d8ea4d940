// mpsd dashboard: jobs table, a job's live charts, compare view, BenchJob table and chart.
// Plain JavaScript on Dygraphs (Debian's libjs-dygraphs, embedded by mpsd). Everything it loads
// comes from the mpsd that served it; the token travels only in Authorization headers (the
// event stream is read with fetch(), which can send headers, not EventSource, which cannot).
'use strict';

const TOKEN_KEY = 'mpsd-token';
const STEP_METRICS = ['loss', 'accuracy', 'learning_rate', 'samples_per_second', 'step_time_ms',
  'allocated_bytes'];
const EPOCH_METRICS = ['train_loss', 'train_accuracy', 'test_loss', 'test_accuracy'];
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED', 'INTERRUPTED']);
const COLORS = ['#1f6feb', '#cf222e', '#1a7f37', '#8250df', '#bc4c00', '#0a7ea4', '#bf3989',
  '#6e7781'];

// Exposed for tests and curious users: the open page's charts and counters.
const state = { whoami: null, page: null, charts: {}, counters: {} };
window.mpsd = state;

// ---------------------------------------------------------------------------------------------
// Small helpers.

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === 'class') node.className = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const num = (v) => (v === undefined || v === null || v === '' ? 0 : Number(v));
const fmt = (v, digits = 3) => (Number.isFinite(v) ? Number(v).toPrecision(digits) : '');
function fmtBytes(b) {
  b = num(b);
  if (b <= 0) return '0';
  if (b < 1024) return b.toFixed(0) + ' B';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  const i = Math.min(units.length - 1, Math.floor(Math.log(b) / Math.log(1024)));
  return (b / 1024 ** i).toFixed(i ? 1 : 0) + ' ' + units[i];
}
function fmtDuration(s) {
  if (!Number.isFinite(s) || s < 0) return '';
  if (s < 60) return s.toFixed(0) + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
  if (s < 86400) return Math.floor(s / 3600) + 'h' + String(Math.floor((s % 3600) / 60)).padStart(2, '0') + 'm';
  return Math.floor(s / 86400) + 'd' + Math.floor((s % 86400) / 3600) + 'h';
}
const seconds = (ts) => (ts ? Date.parse(ts) / 1000 : NaN);
const kindName = (job) => (job.kind === 'BENCH_JOB' ? 'BenchJob' : 'TrainJob');
const camelToSnake = (key) => key.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());

function banner(text, isError = false) {
  const node = document.getElementById('banner');
  node.hidden = !text;
  node.textContent = text || '';
  node.className = isError ? 'error' : '';
}

// ---------------------------------------------------------------------------------------------
// Talking to mpsd.

class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }

async function api(path, options = {}) {
  const headers = { Accept: 'application/json', ...(options.headers || {}) };
  if (token()) headers.Authorization = 'Bearer ' + token();
  const response = await fetch(path, { ...options, headers, cache: 'no-store' });
  if (response.status === 401) {
    // No token yet: just ask. A token that was sent and refused: say so, with mpsd's reason.
    askForToken(token() ? 'The token was refused: ' + await errorText(response) : '');
    throw new HttpError(401, 'unauthenticated');
  }
  if (!response.ok) throw new HttpError(response.status, await errorText(response));
  return response.json();
}

async function errorText(response) {
  const text = await response.text();
  try { return JSON.parse(text).message || text; } catch (e) { return text || response.statusText; }
}

// Reads GET /api/jobs/{id}/events as Server-Sent Events through fetch() (so that the token goes
// in a header), calling onEvent(event) for each JobEvent. Reconnects after a dropped connection
// or a daemon restart with Last-Event-ID set to the last seq received, as an EventSource would,
// and stops after the job's terminal event (or when stop() is called).
function followEvents(ctx, jobId, { afterSeq = 0, omitStepsThrough = 0, onEvent, onStatus }) {
  let lastSeq = afterSeq;
  let stopped = false;
  let controller = null;
  let retryMs = 1000;
  async function connect() {
    while (!stopped) {
      controller = new AbortController();
      const headers = { Accept: 'text/event-stream', Authorization: 'Bearer ' + token() };
      if (lastSeq > 0) headers['Last-Event-ID'] = String(lastSeq);
      let finished = false;
      try {
        const response = await fetch(`api/jobs/${encodeURIComponent(jobId)}/events?after_seq=${afterSeq}` +
          (omitStepsThrough ? `&omit_steps_through=${omitStepsThrough}` : ''),
          { headers, signal: controller.signal, cache: 'no-store' });
        if (response.status === 204) return;  // Nothing after the terminal event.
        if (response.status === 401) { askForToken('The token was refused: ' + await errorText(response)); return; }
        if (!response.ok) throw new HttpError(response.status, await errorText(response));
        onStatus && onStatus('live');
        finished = await readSse(response.body, (id, data) => {
          const event = JSON.parse(data);
          const seq = num(event.seq);
          if (seq <= lastSeq) return false;  // Never twice.
          lastSeq = seq;
          onEvent(event);
          return event.state && TERMINAL.has(event.state.state);
        }, (ms) => { retryMs = ms; }, ctx);
      } catch (error) {
        if (stopped) return;
        if (error instanceof HttpError && error.status < 500) { onStatus && onStatus('error', error.message); return; }
      }
      if (finished || stopped) { onStatus && onStatus('ended'); return; }
      onStatus && onStatus('reconnecting');
      ctx.counters.reconnects = (ctx.counters.reconnects || 0) + 1;
      await new Promise((resolve) => setTimeout(resolve, retryMs));
    }
  }
  if (!ctx.alive) stopped = true;
  connect();
  return { stop() { stopped = true; controller && controller.abort(); }, lastSeq: () => lastSeq };
}

// Parses an SSE body (WHATWG HTML §9.2): calls onMessage(id, data) per message; a true return
// means the stream is complete. Resolves true if onMessage said so, false when the body ended.
async function readSse(body, onMessage, onRetry, ctx) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let id = null;
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buffer += value;
    let newline;
    while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + (buffer.startsWith('\r\n', newline) ? 2 : 1));
      if (line === '') {
        if (data.length) {
          const complete = onMessage(id, data.join('\n'));
          data = [];
          if (complete) { reader.cancel(); return true; }
        }
        continue;
      }
      if (line.startsWith(':')) { ctx.counters.heartbeats = (ctx.counters.heartbeats || 0) + 1; continue; }
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let text = colon < 0 ? '' : line.slice(colon + 1);
      if (text.startsWith(' ')) text = text.slice(1);
      if (field === 'data') data.push(text);
      else if (field === 'id') id = text;
      else if (field === 'retry' && /^\d+$/.test(text)) onRetry(Number(text));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Token.

function askForToken(message) {
  const dialog = document.getElementById('token-dialog');
  const error = document.getElementById('token-error');
  error.hidden = !message;
  error.textContent = message || '';
  banner(message ? message : '', !!message);
  if (!dialog.open) dialog.showModal();
}

async function start() {
  document.getElementById('token-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, document.getElementById('token-input').value.trim());
    document.getElementById('token-input').value = '';
    document.getElementById('token-dialog').close();
    banner('');
    await signIn();
  });
  document.getElementById('logout').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.reload();
  });
  window.addEventListener('hashchange', route);
  await signIn();
}

async function signIn() {
  try {
    state.whoami = await api('api/whoami');
  } catch (error) {
    if (!(error instanceof HttpError && error.status === 401)) banner('Cannot reach mpsd: ' + error.message, true);
    return;
  }
  document.getElementById('whoami').textContent = `${state.whoami.name} (${state.whoami.role})`;
  document.getElementById('logout').hidden = false;
  route();
}

// ---------------------------------------------------------------------------------------------
// Routing: #/ (jobs), #/jobs/ID, #/compare?ids=1,2.

function route() {
  if (!state.whoami) return;
  if (state.page && state.page.leave) state.page.leave();
  if (state.ctx) state.ctx.alive = false;
  // What a page draws and counts; a page left behind keeps writing only to its own.
  const ctx = { counters: {}, charts: {}, alive: true };
  state.ctx = ctx;
  state.charts = ctx.charts;
  state.counters = ctx.counters;
  const main = document.getElementById('main');
  main.replaceChildren();
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query] = hash.split('?');
  const params = new URLSearchParams(query || '');
  let match;
  if ((match = path.match(/^\/jobs\/([^/]+)$/))) state.page = jobPage(ctx, main, decodeURIComponent(match[1]));
  else if (path === '/compare') state.page = comparePage(ctx, main, (params.get('ids') || '').split(',').filter(Boolean));
  else state.page = jobsPage(ctx, main, params);
}

// ---------------------------------------------------------------------------------------------
// Jobs table.

function jobModel(job) {
  const spec = job.spec || {};
  if (spec.trainJob) return (spec.trainJob.model || {}).name || ((spec.trainJob.model || {}).torchscript ? 'torchscript' : '');
  if (spec.benchJob) return (spec.benchJob.models || []).join(', ');
  return '';
}
function jobDataset(job) {
  const train = (job.spec || {}).trainJob;
  return train ? ((train.dataset || {}).name || '') : '';
}
function jobDevice(job) {
  if (job.summary && job.summary.device) return job.summary.device;
  const spec = job.spec || {};
  if (spec.trainJob) return spec.trainJob.device || 'auto';
  if (spec.benchJob) return (spec.benchJob.devices || ['all']).join(', ');
  return '';
}

function progressCell(job) {
  const step = num((job.lastStep || {}).step);
  const total = num((job.lastStep || {}).totalSteps);
  if (job.kind === 'BENCH_JOB') {
    const rows = ((job.summary || {}).benchRows || []).length;
    return el('td', {}, rows ? `${rows} rows` : '');
  }
  if (!total) return el('td', {}, job.state === 'SUCCEEDED' ? '100%' : '');
  const fraction = Math.min(1, step / total);
  let eta = '';
  if (job.state === 'RUNNING' && step > 0 && job.startedAt) {
    const elapsed = Date.now() / 1000 - seconds(job.startedAt);
    eta = ' · ETA ' + fmtDuration(elapsed / fraction - elapsed);
  }
  return el('td', {}, el('div', { class: 'progress', title: `${step}/${total}${eta}` },
    el('div', { style: `width:${(fraction * 100).toFixed(1)}%` }),
    el('span', {}, `${step}/${total}${eta}`)));
}

function jobRow(job, selected, onSelect) {
  const last = job.lastStep || {};
  const testAccuracy = (job.summary && job.summary.testAccuracy !== undefined) ? job.summary.testAccuracy
    : (job.lastEpoch && job.lastEpoch.evaluated ? job.lastEpoch.testAccuracy : undefined);
  const age = fmtDuration(Date.now() / 1000 - seconds(job.createdAt));
  const checkbox = el('input', { type: 'checkbox', 'aria-label': 'select for compare', onclick: (e) => { e.stopPropagation(); onSelect(job.id, e.target.checked); } });
  checkbox.checked = selected;
  return el('tr', { class: 'job', 'data-job-id': job.id, onclick: () => { location.hash = '#/jobs/' + job.id; } },
    el('td', {}, checkbox),
    el('td', { class: 'num' }, job.id),
    el('td', { class: 'hide-narrow' }, kindName(job)),
    el('td', {}, jobModel(job)),
    el('td', { class: 'hide-narrow' }, jobDataset(job)),
    el('td', {}, el('span', { class: 'state state-' + job.state }, job.state)),
    progressCell(job),
    el('td', { class: 'hide-narrow' }, jobDevice(job)),
    el('td', { class: 'num hide-narrow' }, last.samplesPerSecond ? num(last.samplesPerSecond).toFixed(0) : ''),
    el('td', { class: 'num' }, last.loss !== undefined ? fmt(num(last.loss), 4) : ''),
    el('td', { class: 'num' }, testAccuracy !== undefined ? (100 * num(testAccuracy)).toFixed(2) + '%' : ''),
    el('td', { class: 'hide-narrow' }, job.submittedBy || ''),
    el('td', { class: 'num hide-narrow' }, age));
}

function jobsPage(ctx, main, params) {
  const selected = new Set();
  let jobs = new Map();  // id -> job
  let timer = null;
  const stateFilter = el('select', { id: 'filter-state' }, el('option', { value: '' }, 'any state'),
    ['QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'INTERRUPTED'].map((s) => el('option', { value: s }, s.toLowerCase())));
  const kindFilter = el('select', { id: 'filter-kind' }, el('option', { value: '' }, 'any kind'),
    el('option', { value: 'TrainJob' }, 'TrainJob'), el('option', { value: 'BenchJob' }, 'BenchJob'));
  const compare = el('button', { id: 'compare', disabled: true, onclick: () => { location.hash = '#/compare?ids=' + [...selected].join(','); } }, 'Compare selected');
  const count = el('span', { class: 'muted', id: 'job-count' });
  const tbody = el('tbody', { id: 'jobs-body' });
  main.append(el('h1', {}, 'Jobs'),
    el('div', { class: 'toolbar' }, el('label', {}, 'State ', stateFilter), el('label', {}, 'Kind ', kindFilter), compare, count),
    el('div', { class: 'card scroll' }, el('table', { id: 'jobs' },
      el('thead', {}, el('tr', {}, el('th', {}, ''), el('th', { class: 'num' }, 'id'), el('th', { class: 'hide-narrow' }, 'kind'),
        el('th', {}, 'model'), el('th', { class: 'hide-narrow' }, 'dataset'), el('th', {}, 'state'), el('th', {}, 'progress'),
        el('th', { class: 'hide-narrow' }, 'device'), el('th', { class: 'num hide-narrow' }, 'samples/s'), el('th', { class: 'num' }, 'loss'),
        el('th', { class: 'num' }, 'test acc'), el('th', { class: 'hide-narrow' }, 'submitted by'), el('th', { class: 'num hide-narrow' }, 'age'))),
      tbody)));

  function render() {
    const wantState = stateFilter.value, wantKind = kindFilter.value;
    const rows = [...jobs.values()].filter((job) => (!wantState || job.state === wantState) && (!wantKind || kindName(job) === wantKind))
      .sort((a, b) => num(b.id) - num(a.id));
    tbody.replaceChildren(...rows.map((job) => jobRow(job, selected.has(job.id), (id, on) => {
      on ? selected.add(id) : selected.delete(id);
      compare.disabled = selected.size < 2;
    })));
    count.textContent = `${rows.length} of ${jobs.size} jobs`;
    ctx.counters.rendered = (ctx.counters.rendered || 0) + 1;
  }
  stateFilter.addEventListener('change', render);
  kindFilter.addEventListener('change', render);

  // Everything once, then only the jobs that can still change (queued, running) every 2 s;
  // the whole list again only when that set changes (a job finished, or a new one came).
  async function loadAll() {
    const all = [];
    let pageToken = '';
    do {
      const page = await api('api/jobs?page_size=1000' + (pageToken ? '&page_token=' + encodeURIComponent(pageToken) : ''));
      all.push(...(page.jobs || []));
      pageToken = page.nextPageToken || '';
    } while (pageToken);
    jobs = new Map(all.map((job) => [job.id, job]));
    render();
    ctx.counters.loaded = performance.now();
  }
  async function refreshActive() {
    const page = await api('api/jobs?page_size=1000&state=QUEUED,RUNNING');
    const active = page.jobs || [];
    const known = [...jobs.values()].filter((job) => !TERMINAL.has(job.state)).map((j) => j.id).sort().join();
    const now = active.map((j) => j.id).sort().join();
    if (known !== now) return loadAll();
    for (const job of active) jobs.set(job.id, job);
    render();
  }
  async function tick() {
    try {
      if (document.visibilityState !== 'hidden') await refreshActive();
      banner('');
    } catch (error) {
      if (!(error instanceof HttpError && error.status === 401)) banner('mpsd unreachable, retrying: ' + error.message, true);
    }
    if (ctx.alive) timer = setTimeout(tick, 2000);
  }
  loadAll().then(() => { if (ctx.alive) timer = setTimeout(tick, 2000); }, (error) => {
    if (!(error instanceof HttpError && error.status === 401)) banner('Cannot list jobs: ' + error.message, true);
  });
  return { leave() { clearTimeout(timer); } };
}

// ---------------------------------------------------------------------------------------------
// Charts.

// TensorBoard's smoothing: an exponential moving average, debiased for the first points
// (tensorboard/plugins/scalar/tf_scalar_dashboard: last = last * w + (1 - w) * v, divided by
// 1 - w^n).
function ema(values, weight) {
  const out = new Array(values.length);
  let last = 0, n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (!Number.isFinite(v)) { out[i] = v; continue; }
    last = last * weight + (1 - weight) * v;
    n++;
    out[i] = weight === 0 ? v : last / (1 - weight ** n);
  }
  return out;
}

function chart(container, labels, options = {}) {
  const empty = [new Array(labels.length).fill(null)];
  empty[0][0] = 0;
  const graph = new Dygraph(container, empty, {
    labels, colors: COLORS, legend: 'always', labelsSeparateLines: false, connectSeparatedPoints: true,
    animatedZooms: false, strokeWidth: 1.3, gridLineColor: '#e5e8eb', axisLabelFontSize: 11,
    labelsDiv: options.labelsDiv, ...options,
  });
  return graph;
}

// Holds one chart's rows and redraws at most every 200 ms, keeping the user's zoom (Dygraphs
// keeps dateWindow/valueRange across updateOptions({file})).
class LiveChart {
  constructor(container, labels, options = {}) {
    this.rows = [];
    this.labels = labels;
    this.graph = chart(container, labels, options);
    this.pending = false;
  }
  set(rows) { this.rows = rows; this.redraw(); }
  push(row) { this.rows.push(row); this.redraw(); }
  redraw() {
    if (!this.drawn && this.rows.length) {  // The first draw at once; later ones throttled.
      this.drawn = true;
      this.graph.updateOptions({ file: this.rows });
      if (this.onFirstDraw) this.onFirstDraw();
      return;
    }
    if (this.pending) return;
    this.pending = true;
    setTimeout(() => {
      this.pending = false;
      if (this.rows.length) this.graph.updateOptions({ file: this.rows });
    }, 200);
  }
  numRows() { return this.rows.length; }
}

function chartCard(title, id, extra) {
  const box = el('div', { class: 'chart', id });
  const legend = el('div', { class: 'muted legend' });
  return { card: el('div', { class: 'card' }, el('h2', {}, title), extra || null, box, legend), box, legend };
}

// ---------------------------------------------------------------------------------------------
// A job's page.

function facts(pairs) {
  return el('div', { class: 'facts' }, pairs.filter(([, v]) => v !== '' && v !== undefined).map(([k, v]) => el('div', {}, el('span', {}, k), v)));
}

function jobFacts(job) {
  const last = job.lastStep || {};
  const summary = job.summary || {};
  const memory = summary.memory || {};
  return facts([
    ['state', el('span', { class: 'state state-' + job.state, id: 'job-state' }, job.state)],
    ['kind', kindName(job)], ['model', jobModel(job)], ['dataset', jobDataset(job)], ['device', jobDevice(job)],
    ['step', last.totalSteps ? `${num(last.step)}/${num(last.totalSteps)}` : ''],
    ['epoch', (job.lastEpoch || {}).epoch ? String(job.lastEpoch.epoch) : ''],
    ['samples/s', last.samplesPerSecond ? num(last.samplesPerSecond).toFixed(0) : ''],
    ['submitted by', job.submittedBy || ''],
    ['created', job.createdAt ? new Date(job.createdAt).toLocaleString() : ''],
    ['test accuracy', summary.testAccuracy !== undefined ? (100 * num(summary.testAccuracy)).toFixed(2) + '%' : ''],
    ['total time', summary.totalTimeS ? fmtDuration(num(summary.totalTimeS)) : ''],
    ['peak allocated', memory.peakAllocatedBytes ? fmtBytes(memory.peakAllocatedBytes) : ''],
    ['peak reserved', memory.peakReservedBytes ? fmtBytes(memory.peakReservedBytes) : ''],
    ['reserved after', memory.reservedAfterBytes ? fmtBytes(memory.reservedAfterBytes) : ''],
    ['message', job.message || ''],
  ]);
}

function canCancel(job) {
  if (TERMINAL.has(job.state) || !state.whoami) return false;
  if (state.whoami.role === 'admin') return true;
  return state.whoami.role === 'submitter' && job.submittedBy === state.whoami.name;
}

function jobPage(ctx, main, jobId) {
  let follower = null;
  let job = null;
  const live = el('span', { class: 'muted', id: 'live-status' });
  const cancel = el('button', { class: 'danger', id: 'cancel', hidden: true, onclick: async () => {
    if (!confirm(`Cancel job ${jobId}?`)) return;
    try { await api(`api/jobs/${encodeURIComponent(jobId)}/cancel`, { method: 'POST' }); } catch (error) { banner('Cancel failed: ' + error.message, true); }
  } }, 'Cancel job');
  const head = el('div');
  main.append(el('div', { class: 'toolbar' }, el('h1', {}, `Job ${jobId}`), live, cancel), head);
  const body = el('div');
  main.append(body);

  function showHead() {
    head.replaceChildren(jobFacts(job));
    cancel.hidden = !canCancel(job);
  }

  api(`api/jobs/${encodeURIComponent(jobId)}`).then((loaded) => {
    job = loaded;
    showHead();
    if (job.kind === 'BENCH_JOB') benchView(ctx, body, job, (f) => { follower = f; }, refresh);
    else trainView(ctx, body, job, (f) => { follower = f; }, refresh, live);
  }, (error) => {
    if (!(error instanceof HttpError && error.status === 401)) main.append(el('p', { class: 'error', id: 'page-error' }, `Job ${jobId}: ${error.message}`));
  });

  // The facts at the top follow the job's row, refreshed when a state change arrives.
  async function refresh() {
    try { job = await api(`api/jobs/${encodeURIComponent(jobId)}`); showHead(); } catch (e) { /* next event retries */ }
  }
  return { leave() { follower && follower.stop(); } };
}

function trainView(ctx, body, job, setFollower, refresh, live) {
  const smoothing = el('input', { type: 'range', min: '0', max: '0.99', step: '0.01', value: '0.6', id: 'smoothing' });
  const smoothingValue = el('span', {}, '0.6');
  const loss = chartCard('Loss per step', 'chart-loss', el('div', { class: 'toolbar' }, el('label', {}, 'Smoothing (EMA) ', smoothing), smoothingValue));
  const epochLoss = chartCard('Loss per epoch', 'chart-epoch-loss');
  const epochAcc = chartCard('Accuracy per epoch', 'chart-epoch-accuracy');
  const lr = chartCard('Learning rate', 'chart-lr');
  const speed = chartCard('Samples/s and step time', 'chart-speed');
  const memory = chartCard('Device memory allocated', 'chart-memory');
  const logs = el('div', { class: 'log', id: 'log' });
  const yaml = el('pre', { id: 'spec-yaml' }, specYaml(job));
  body.append(el('div', { class: 'grid' }, loss.card, epochLoss.card, epochAcc.card, lr.card, speed.card, memory.card),
    el('div', { class: 'grid', style: 'margin-top:1em' },
      el('div', { class: 'card' }, el('h2', {}, 'Log and state changes'), logs),
      el('div', { class: 'card' }, el('h2', {}, 'Spec'), yaml)));

  // Epoch charts span the job's epochs from the start, so that one point is not a lone dot
  // at the edge; points are drawn, as there are few.
  const epochCount = num((job.spec.trainJob || {}).epochs) || 1;
  const epochAxis = { drawPoints: true, pointSize: 3, dateWindow: [0.8, epochCount + 0.2],
    axes: { x: { pixelsPerLabel: 30, axisLabelFormatter: (x) => (Number.isInteger(x) ? String(x) : '') } } };
  const charts = {
    loss: new LiveChart(loss.box, ['step', 'loss', 'smoothed'], { labelsDiv: loss.legend, xlabel: 'step',
      series: { loss: { color: 'rgba(31,111,235,0.35)', strokeWidth: 1 }, smoothed: { color: '#1f6feb', strokeWidth: 2 } } }),
    epochLoss: new LiveChart(epochLoss.box, ['epoch', 'train loss', 'test loss'], { labelsDiv: epochLoss.legend, xlabel: 'epoch', ...epochAxis }),
    epochAccuracy: new LiveChart(epochAcc.box, ['epoch', 'train accuracy', 'test accuracy'], { labelsDiv: epochAcc.legend, xlabel: 'epoch', ...epochAxis }),
    learningRate: new LiveChart(lr.box, ['step', 'learning rate'], { labelsDiv: lr.legend, xlabel: 'step' }),
    speed: new LiveChart(speed.box, ['step', 'samples/s', 'step ms'], { labelsDiv: speed.legend, xlabel: 'step',
      series: { 'step ms': { axis: 'y2' } }, axes: { y2: { independentTicks: true } }, ylabel: 'samples/s', y2label: 'ms' }),
    memory: new LiveChart(memory.box, ['step', 'allocated'], { labelsDiv: memory.legend, xlabel: 'step',
      axes: { y: { valueFormatter: fmtBytes, axisLabelFormatter: fmtBytes } } }),
  };
  Object.assign(ctx.charts, charts);
  // Raw step values, kept for the smoothing slider; epoch rows by epoch.
  const steps = { x: [], loss: [], lr: [], sps: [], ms: [], mem: [] };
  const epochs = new Map();

  function drawLoss() {
    const smoothed = ema(steps.loss, Number(smoothing.value));
    charts.loss.set(steps.x.map((x, i) => [x, steps.loss[i], smoothed[i]]));
  }
  smoothing.addEventListener('input', () => { smoothingValue.textContent = smoothing.value; drawLoss(); });
  function addStep(x, loss, lrValue, sps, ms, mem) {
    steps.x.push(x); steps.loss.push(loss); steps.lr.push(lrValue); steps.sps.push(sps); steps.ms.push(ms); steps.mem.push(mem);
  }
  function drawSteps() {
    drawLoss();
    charts.learningRate.set(steps.x.map((x, i) => [x, steps.lr[i]]));
    charts.speed.set(steps.x.map((x, i) => [x, steps.sps[i], steps.ms[i]]));
    charts.memory.set(steps.x.map((x, i) => [x, steps.mem[i]]));
    ctx.counters.stepPoints = steps.x.length;
  }
  function drawEpochs() {
    const rows = [...epochs.values()].sort((a, b) => a.epoch - b.epoch);
    charts.epochLoss.set(rows.map((e) => [e.epoch, num(e.trainLoss), e.evaluated ? num(e.testLoss) : null]));
    charts.epochAccuracy.set(rows.map((e) => [e.epoch, num(e.trainAccuracy), e.evaluated ? num(e.testAccuracy) : null]));
    ctx.counters.epochPoints = rows.length;
  }
  function addLog(event) {
    let line = null;
    const time = event.time ? new Date(event.time).toLocaleTimeString() : '';
    if (event.log) line = el('div', { class: event.log.level || '' }, `${time} ${event.log.text}`);
    else if (event.state) line = el('div', { class: 'statechange' }, `${time} → ${event.state.state}${event.state.failureReason ? ' (' + event.state.failureReason + ')' : ''}${event.state.message ? ': ' + event.state.message : ''}`);
    else if (event.checkpoint) line = el('div', {}, `${time} checkpoint epoch ${event.checkpoint.epoch}: ${event.checkpoint.path} (${fmtBytes(event.checkpoint.sizeBytes)})`);
    else if (event.summary) line = el('div', {}, `${time} summary: test accuracy ${(100 * num(event.summary.testAccuracy)).toFixed(2)}%, ${num(event.summary.samplesPerSecond).toFixed(0)} samples/s`);
    if (!line) return;
    const atBottom = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
    logs.append(line);
    if (atBottom) logs.scrollTop = logs.scrollHeight;
  }

  // The step curves come first from the series endpoint (downsampled beyond max_points, with
  // every spike kept); the event stream then replays everything else and follows live, leaving
  // out the steps the series already held.
  const metrics = ['loss', 'learning_rate', 'samples_per_second', 'step_time_ms', 'allocated_bytes'];
  api(`api/jobs/${encodeURIComponent(job.id)}/series?metric=${metrics.join(',')}&max_points=4000`).then((series) => {
    const byName = Object.fromEntries(series.series.map((s) => [s.metric, s.points]));
    const lossPoints = byName.loss || [];
    // The metrics of one step share x; the downsampling keeps different points per metric, so
    // each chart takes its own series, joined on the loss series' steps where they agree.
    const index = (points) => new Map(points.map((p) => [p[0], p[1]]));
    const lrAt = index(byName.learning_rate || []), spsAt = index(byName.samples_per_second || []);
    const msAt = index(byName.step_time_ms || []), memAt = index(byName.allocated_bytes || []);
    for (const [x, value] of lossPoints) addStep(x, value, lrAt.get(x) ?? null, spsAt.get(x) ?? null, msAt.get(x) ?? null, memAt.get(x) ?? null);
    charts.loss.onFirstDraw = () => { ctx.counters.firstChart = performance.now(); };
    drawSteps();
    const follower = followEvents(ctx, job.id, {
      afterSeq: 0, omitStepsThrough: num(series.throughSeq),
      onEvent: (event) => {
        if (event.step) {
          const s = event.step;
          addStep(num(s.step), num(s.loss), num(s.learningRate), num(s.samplesPerSecond), num(s.stepTimeMs), num(s.allocatedBytes));
          ctx.counters.stepsStreamed = (ctx.counters.stepsStreamed || 0) + 1;
          drawSteps();
        } else if (event.epoch) {
          epochs.set(num(event.epoch.epoch), { ...event.epoch, epoch: num(event.epoch.epoch) });
          drawEpochs();
        } else {
          addLog(event);
          if (event.state || event.summary) refresh();
        }
        ctx.counters.lastSeq = num(event.seq);
      },
      onStatus: (status, message) => {
        live.textContent = status === 'live' ? '● live' : status === 'reconnecting' ? 'reconnecting…' : status === 'ended' ? 'finished' : 'error: ' + message;
        ctx.counters.status = status;
      },
    });
    setFollower(follower);
  }, (error) => banner('Cannot load the series: ' + error.message, true));
}

// ---------------------------------------------------------------------------------------------
// The spec as a job file (YAML), keys as the proto names them.

function yamlScalar(v) {
  // The JSON mapping spells 64-bit integers as strings: a job file spells them as numbers.
  if (typeof v === 'string' && /^-?\d+$/.test(v)) return v;
  if (typeof v === 'string') return /^[\w./:@+-]+$/.test(v) && !/^(true|false|null|yes|no|~|[-+]?[\d.]+(e[-+]?\d+)?)$/i.test(v) ? v : JSON.stringify(v);
  return String(v);
}
function toYaml(value, indent = '') {
  const lines = [];
  for (const [key, v] of Object.entries(value)) {
    const name = camelToSnake(key);
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
      if (!Object.keys(v).length) continue;
      lines.push(`${indent}${name}:`, toYaml(v, indent + '  '));
    } else if (Array.isArray(v)) {
      if (v.every((x) => typeof x !== 'object')) lines.push(`${indent}${name}: [${v.map(yamlScalar).join(', ')}]`);
      else for (const item of v) lines.push(`${indent}${name}:`, `${indent}- ` + toYaml(item, indent + '  ').trimStart());
    } else {
      lines.push(`${indent}${name}: ${yamlScalar(v)}`);
    }
  }
  return lines.join('\n');
}
function specObject(job) {
  const spec = job.spec || {};
  const { trainJob, benchJob, ...rest } = spec;
  return { kind: benchJob ? 'BenchJob' : 'TrainJob', ...(trainJob || benchJob || {}), ...rest };
}
function specYaml(job) { return toYaml(specObject(job)) + '\n'; }

// ---------------------------------------------------------------------------------------------
// BenchJob: the seeds' table (models and batch sizes by devices, speedup last) and a bar chart.

function benchView(ctx, body, job, setFollower, refresh) {
  const rows = [];
  const table = el('div', { class: 'scroll', id: 'bench-table' });
  const measure = el('select', { id: 'bench-measure' }, el('option', { value: 'ms' }, 'ms per batch (p10–p90)'), el('option', { value: 'sps' }, 'samples/s'));
  const bars = chartCard('Bench', 'chart-bench', el('div', { class: 'toolbar' }, el('label', {}, 'Show ', measure)));
  const yaml = el('pre', { id: 'spec-yaml' }, specYaml(job));
  body.append(el('div', { class: 'card' }, el('h2', {}, 'Rows'), table), bars.card, el('div', { class: 'card' }, el('h2', {}, 'Spec'), yaml));
  let graph = null;
  measure.addEventListener('change', () => draw());

  function draw() {
    const view = benchLayout(rows);
    table.replaceChildren(benchTable(view));
    ctx.counters.benchRows = rows.length;
    if (!view.groups.length) return;
    const sps = measure.value === 'sps';
    const data = view.groups.map((group, i) => [i + 1, ...view.devices.map((device) => {
      const row = group.cells.get(device);
      if (!row || row.status !== 'OK') return sps ? null : [null, null, null];
      return sps ? num(row.samplesPerSecond) : [num(row.p10Ms), num(row.medianMs), num(row.p90Ms)];
    })]);
    const options = {
      file: data, labels: ['row', ...view.devices], customBars: !sps, plotter: barPlotter, labelsDiv: bars.legend,
      dateWindow: [0.4, view.groups.length + 0.6], includeZero: true, ylabel: sps ? 'samples/s' : 'ms per batch',
      axes: { x: { ticker: () => view.groups.map((g, i) => ({ v: i + 1, label: g.label })), valueFormatter: (x) => (view.groups[x - 1] || {}).label || '' } },
    };
    if (!graph) graph = new Dygraph(bars.box, data, { colors: COLORS, legend: 'always', ...options });
    else graph.updateOptions(options);
    ctx.charts.bench = graph;
  }
  const follower = followEvents(ctx, job.id, {
    onEvent: (event) => {
      if (event.benchRow) { rows.push(event.benchRow); draw(); }
      if (event.state || event.summary) refresh();
    },
    onStatus: () => {},
  });
  setFollower(follower);
}

// Rows grouped as the seeds' tables: one line per model × batch size (× mode, precision, memory
// format when the job has several), one column per device.
function benchLayout(rows) {
  const devices = [...new Set(rows.map((r) => r.device))].sort((a, b) => (a === 'cpu' ? -1 : b === 'cpu' ? 1 : a.localeCompare(b)));
  const varies = (key) => new Set(rows.map((r) => r[key] || '')).size > 1;
  const extra = ['mode', 'precision', 'memoryFormat'].filter(varies);
  const groups = new Map();
  for (const row of rows) {
    const key = [row.model, row.batchSize, ...extra.map((k) => row[k])].join('|');
    if (!groups.has(key)) groups.set(key, { label: `${row.model} ×${row.batchSize}` + extra.map((k) => ' ' + row[k]).join(''), row, cells: new Map() });
    groups.get(key).cells.set(row.device, row);
  }
  return { devices, extra, groups: [...groups.values()] };
}

function benchTable(view) {
  const speedupDevices = view.devices.filter((d) => d !== 'cpu');
  return el('table', {},
    el('thead', {}, el('tr', {}, el('th', {}, 'model'), el('th', { class: 'num' }, 'batch'), view.extra.map((k) => el('th', {}, camelToSnake(k))),
      view.devices.map((d) => el('th', { class: 'num' }, `${d} ms`)), speedupDevices.map((d) => el('th', { class: 'num' }, `${d} speedup`)))),
    el('tbody', {}, view.groups.map((g) => el('tr', { class: 'bench-row' },
      el('td', {}, g.row.model), el('td', { class: 'num' }, g.row.batchSize), view.extra.map((k) => el('td', {}, g.row[k])),
      view.devices.map((d) => {
        const r = g.cells.get(d);
        if (!r) return el('td', {}, '');
        if (r.status !== 'OK') return el('td', { class: 'num error', title: r.message || '' }, r.status);
        return el('td', { class: 'num', title: `p10 ${fmt(num(r.p10Ms))} · p90 ${fmt(num(r.p90Ms))} · ${num(r.samplesPerSecond).toFixed(1)} samples/s` }, num(r.medianMs).toFixed(2));
      }),
      speedupDevices.map((d) => { const r = g.cells.get(d); return el('td', { class: 'num' }, r && r.speedupVsCpu ? num(r.speedupVsCpu).toFixed(2) + '×' : ''); })))));
}

// Dygraphs plotter for grouped bars (after the multi-column bar chart in Dygraphs' gallery),
// with whiskers from the custom bars' low and high values when there are any.
function barPlotter(e) {
  if (e.seriesIndex !== 0) return;
  const g = e.dygraph, ctx = e.drawingContext, sets = e.allSeriesPoints;
  const series = sets.length;
  const xs = sets[0].map((p) => p.canvasx);
  const gap = xs.length > 1 ? Math.min(...xs.slice(1).map((x, i) => x - xs[i])) : e.plotArea.w / 2;
  const barWidth = Math.max(2, Math.floor((gap * 0.7) / series));
  const zero = g.toDomYCoord(0);
  for (let j = 0; j < series; j++) {
    ctx.fillStyle = COLORS[j % COLORS.length];
    ctx.strokeStyle = '#24292f';
    for (const p of sets[j]) {
      if (p.yval === null || !Number.isFinite(p.yval)) continue;
      const left = p.canvasx - (barWidth * series) / 2 + j * barWidth;
      ctx.fillRect(left, p.canvasy, barWidth - 1, zero - p.canvasy);
      if (p.y_top !== undefined && p.y_bottom !== undefined && Number.isFinite(p.y_top)) {
        const top = e.plotArea.y + p.y_top * e.plotArea.h, bottom = e.plotArea.y + p.y_bottom * e.plotArea.h;
        const mid = left + (barWidth - 1) / 2;
        ctx.beginPath();
        ctx.moveTo(mid, top); ctx.lineTo(mid, bottom);
        ctx.moveTo(mid - 3, top); ctx.lineTo(mid + 3, top);
        ctx.moveTo(mid - 3, bottom); ctx.lineTo(mid + 3, bottom);
        ctx.stroke();
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Compare: several jobs' curves on the same axes, and the spec keys whose values differ.

// The spec flattened to dotted key paths (job file names), arrays as one value each.
function flatten(value, prefix = '', out = {}) {
  for (const [key, v] of Object.entries(value)) {
    const path = prefix + camelToSnake(key);
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) flatten(v, path + '.', out);
    else out[path] = Array.isArray(v) ? JSON.stringify(v) : String(v);
  }
  return out;
}

// Keys whose values are not the same in every spec (a key missing from some counts as
// differing), sorted; each with the value per job ('' where absent).
function specDifferences(specs) {
  const flat = specs.map((s) => flatten(s));
  const keys = [...new Set(flat.flatMap(Object.keys))].sort();
  return keys.filter((k) => new Set(flat.map((f) => (k in f ? f[k] : '\u0000absent'))).size > 1)
    .map((k) => ({ key: k, values: flat.map((f) => (k in f ? f[k] : '')) }));
}

function comparePage(ctx, main, ids) {
  const followers = [];
  const metric = el('select', { id: 'compare-metric' }, [...STEP_METRICS, ...EPOCH_METRICS].map((m) => el('option', { value: m }, m)));
  const xAxis = el('select', { id: 'compare-x' }, el('option', { value: 'step' }, 'step'), el('option', { value: 'epoch' }, 'epoch'), el('option', { value: 'time' }, 'wall time (s)'));
  const idsInput = el('input', { id: 'compare-ids', value: ids.join(','), size: 12, placeholder: '1,2,3' });
  const go = el('button', { onclick: () => { location.hash = '#/compare?ids=' + idsInput.value.replace(/\s+/g, ''); } }, 'Compare');
  const card = chartCard('Overlay', 'chart-compare');
  const diff = el('div', { class: 'scroll', id: 'spec-diff' });
  main.append(el('h1', {}, 'Compare'), el('div', { class: 'toolbar' }, el('label', {}, 'Jobs ', idsInput), go,
    el('label', {}, 'Metric ', metric), el('label', {}, 'x ', xAxis)), card.card,
    el('div', { class: 'card' }, el('h2', {}, 'Spec keys that differ'), diff));
  if (ids.length < 1) { diff.append(el('p', { class: 'muted' }, 'Pick jobs in the jobs table, or type their ids.')); return {}; }
  let jobs = [];
  let graph = null;
  let generation = 0;

  async function draw() {
    if (!ctx.alive) return;
    const mine = ++generation;
    const name = metric.value, x = xAxis.value;
    const isEpoch = EPOCH_METRICS.includes(name);
    const series = await Promise.all(jobs.map((job) => api(`api/jobs/${encodeURIComponent(job.id)}/series?metric=${name}&max_points=2000`)));
    if (mine !== generation) return;
    // One row per distinct x; each job's column holds its value there (null elsewhere).
    const byX = new Map();
    series.forEach((s, j) => {
      const job = jobs[j];
      const start = seconds(job.startedAt) || 0;
      const total = num((job.lastStep || {}).totalSteps), epochs = num(((job.spec || {}).trainJob || {}).epochs) || 1;
      for (const [px, value, timeUs] of s.series[0].points) {
        let xv = px;
        if (x === 'time') xv = +(timeUs / 1e6 - start).toFixed(3);
        else if (x === 'epoch' && !isEpoch) xv = total ? (px / total) * epochs : px;
        else if (x === 'step' && isEpoch) xv = total ? (px / epochs) * total : px;
        if (!byX.has(xv)) byX.set(xv, new Array(jobs.length).fill(null));
        byX.get(xv)[j] = value;
      }
    });
    const rows = [...byX.entries()].sort((a, b) => a[0] - b[0]).map(([xv, values]) => [xv, ...values]);
    const labels = [x, ...jobs.map((job) => `job ${job.id} (${jobModel(job)})`)];
    ctx.counters.compareSeries = jobs.length;
    ctx.counters.comparePoints = series.map((s) => s.series[0].points.length);
    if (!rows.length) rows.push([0, ...jobs.map(() => null)]);
    const options = { file: rows, labels, xlabel: x === 'time' ? 'seconds since start' : x, ylabel: name, drawPoints: isEpoch, pointSize: 3 };
    if (!graph) graph = new Dygraph(card.box, rows, { colors: COLORS, legend: 'always', labelsDiv: card.legend, connectSeparatedPoints: true, ...options });
    else graph.updateOptions(options);
    ctx.charts.compare = graph;
  }
  function showDiff() {
    const differences = specDifferences(jobs.map(specObject));
    ctx.counters.diffKeys = differences.map((d) => d.key);
    diff.replaceChildren(differences.length ? el('table', { class: 'diff' },
      el('thead', {}, el('tr', {}, el('th', {}, 'key'), jobs.map((job) => el('th', {}, `job ${job.id}`)))),
      el('tbody', {}, differences.map((d) => el('tr', {}, el('td', {}, d.key), d.values.map((v) => el('td', {}, v))))))
      : el('p', { class: 'muted' }, 'The specs are the same.'));
  }
  Promise.all(ids.map((id) => api(`api/jobs/${encodeURIComponent(id)}`))).then((loaded) => {
    jobs = loaded;
    showDiff();
    draw();
    // Running jobs' curves grow: redraw when any of them gets events, at most every 2 s.
    let due = false;
    for (const job of jobs.filter((j) => !TERMINAL.has(j.state))) {
      followers.push(followEvents(ctx, job.id, { afterSeq: num(job.lastSeq), onEvent: () => {
        if (due) return;
        due = true;
        setTimeout(() => { due = false; draw(); }, 2000);
      } }));
    }
  }, (error) => diff.replaceChildren(el('p', { class: 'error', id: 'page-error' }, error.message)));
  metric.addEventListener('change', draw);
  xAxis.addEventListener('change', draw);
  return { leave() { followers.forEach((f) => f.stop()); } };
}

start();
