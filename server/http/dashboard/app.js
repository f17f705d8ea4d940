// mpsd dashboard: jobs table, a job's live charts, a sweep's ranked trials, compare view,
// BenchJob table and chart. Plain JavaScript on Dygraphs (Debian's libjs-dygraphs, embedded by
// mpsd). Everything it loads comes from the mpsd that served it; the token travels only in
// Authorization headers (the event stream is read with fetch(), which can send headers, not
// EventSource, which cannot).
'use strict';

const TOKEN_KEY = 'mpsd-token';
const STEP_METRICS = ['loss', 'accuracy', 'learning_rate', 'samples_per_second', 'step_time_ms',
  'allocated_bytes'];
const EPOCH_METRICS = ['train_loss', 'train_accuracy', 'val_loss', 'val_accuracy', 'test_loss', 'test_accuracy'];
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED', 'INTERRUPTED']);
const COLORS = ['#1f6feb', '#cf222e', '#1a7f37', '#8250df', '#bc4c00', '#0a7ea4', '#bf3989',
  '#6e7781'];
// Charts of a followed job redraw at most this often (ms); the jobs table polls this often.
const REDRAW_MS = 250;
const POLL_MS = 2000;
// Rows of the jobs table per page.
const PAGE_ROWS = 100;

// Exposed for tests and curious users: the open page's charts and counters, and the longest
// main-thread task seen (Long Tasks API, through the performance timeline).
const state = { whoami: null, page: null, charts: {}, counters: {}, longestTaskMs: 0, longTasks: 0 };
window.mpsd = state;
try {
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      state.longTasks++;
      state.longestTaskMs = Math.max(state.longestTaskMs, entry.duration);
    }
  }).observe({ type: 'longtask', buffered: true });
} catch (e) { /* No Long Tasks API in this browser. */ }

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
// Bytes in binary units: "512 B", "1.5 KiB", "2.25 GiB" (three significant digits).
function fmtBytes(b) {
  b = Number(b);
  if (!Number.isFinite(b)) return '';
  if (b === 0) return '0 B';
  const sign = b < 0 ? '-' : '';
  b = Math.abs(b);
  if (b < 1024) return sign + Number(b.toPrecision(3)) + ' B';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  const i = Math.min(units.length - 1, Math.floor(Math.log2(b) / 10));
  return sign + Number((b / 1024 ** i).toPrecision(3)) + ' ' + units[i];
}
// Scientific notation for quantities like learning rates: "1e-3", "2.5e-4"; 0 as "0".
function fmtSci(v) {
  v = Number(v);
  if (!Number.isFinite(v)) return '';
  if (v === 0) return '0';
  return Number(v.toPrecision(3)).toExponential().replace('e+', 'e');
}
// Dygraphs axis ticks on byte values at powers of two of a binary unit (1, 2, 4 … KiB, MiB,
// GiB), so that labels read "512 MiB", "1 GiB", not "1.07e9".
function byteTicks(min, max, pixels, opts) {
  const want = Math.max(2, Math.floor(pixels / (opts('pixelsPerLabel') || 30)));
  if (!(max > min)) return [{ v: min, label: fmtBytes(min) }];
  let step = 2 ** Math.ceil(Math.log2((max - min) / want));
  // Prefer 1, 2, 4, 8 … of a unit, and multiples of 256 within a unit (0.25, 0.5, 0.75 GiB).
  const ticks = [];
  for (let v = Math.ceil(min / step) * step; v <= max && ticks.length < 50; v += step) ticks.push({ v, label: fmtBytes(v) });
  return ticks;
}
function fmtDuration(s) {
  if (!Number.isFinite(s) || s < 0) return '';
  if (s < 60) return s.toFixed(0) + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
  if (s < 86400) return Math.floor(s / 3600) + 'h' + String(Math.floor((s % 3600) / 60)).padStart(2, '0') + 'm';
  return Math.floor(s / 86400) + 'd' + Math.floor((s % 86400) / 3600) + 'h';
}
const seconds = (ts) => (ts ? Date.parse(ts) / 1000 : NaN);
const KIND_NAMES = { BENCH_JOB: 'BenchJob', SWEEP: 'Sweep', EVAL_JOB: 'EvalJob', PREDICT_JOB: 'PredictJob' };
const kindName = (job) => KIND_NAMES[job.kind] || 'TrainJob';
const camelToSnake = (key) => key.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());
const jobLink = (id, text) => el('a', { href: '#/jobs/' + encodeURIComponent(id), class: 'job-link' }, text === undefined ? id : text);
// A job's state for a table: EARLY_STOPPED for a sweep trial its sweep's scheduler stopped
// (CANCELLED with that failure reason: the rule working, not a cancel), as mpsctl shows it.
const stateLabel = (job) => (job.state === 'CANCELLED' && job.failureReason === 'EARLY_STOPPED' ? 'EARLY_STOPPED' : job.state);
const stateBadge = (job) => el('span', { class: 'state state-' + stateLabel(job), title: job.message || '' }, stateLabel(job));

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

// The token: this tab's sessionStorage, or localStorage when the user ticked "remember" (so
// that links opened in new tabs need not ask again).
function token() { return sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY) || ''; }

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
    const value = document.getElementById('token-input').value.trim();
    sessionStorage.setItem(TOKEN_KEY, value);
    if (document.getElementById('token-remember').checked) localStorage.setItem(TOKEN_KEY, value);
    else localStorage.removeItem(TOKEN_KEY);
    document.getElementById('token-input').value = '';
    document.getElementById('token-dialog').close();
    banner('');
    await signIn();
  });
  document.getElementById('logout').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    localStorage.removeItem(TOKEN_KEY);
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
// Routing: #/ (jobs, ?state=&kind=&name=&label=&page=), #/jobs/ID (a job; a sweep's trials),
// #/compare?ids=1,2&metric=loss&smoothing=0.6&log=1&x=step. A view that changes its own query
// (filters, compare controls) rewrites the URL without routing again (replaceHash).

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
  else if (path === '/compare') state.page = comparePage(ctx, main, params);
  else state.page = jobsPage(ctx, main, params);
}

// Sets the URL's query for the current view without routing again (history.replaceState does
// not fire hashchange).
function replaceHash(path, params) {
  const entries = [...params.entries()].filter(([, v]) => v !== '' && v !== null && v !== undefined);
  const query = new URLSearchParams(entries).toString();
  history.replaceState(null, '', '#' + path + (query ? '?' + query.replace(/%2C/g, ',') : ''));
}

// ---------------------------------------------------------------------------------------------
// Jobs table.

function jobModel(job) {
  const spec = job.spec || {};
  if (spec.trainJob) return (spec.trainJob.model || {}).name || ((spec.trainJob.model || {}).torchscript ? 'torchscript' : '');
  if (spec.benchJob) return (spec.benchJob.models || []).join(', ');
  const used = spec.evalJob || spec.predictJob;
  if (used) return /^\d+$/.test(used.model || '') ? `job ${used.model}` : (used.model || '');
  return '';
}
function jobDataset(job) {
  const withData = (job.spec || {}).trainJob || (job.spec || {}).evalJob;
  return withData ? ((withData.dataset || {}).name || '') : '';
}
function jobDevice(job) {
  if (job.summary && job.summary.device) return job.summary.device;
  const spec = job.spec || {};
  if (spec.trainJob) return spec.trainJob.device || 'auto';
  if (spec.benchJob) return (spec.benchJob.devices || ['all']).join(', ');
  if (spec.evalJob || spec.predictJob) return (spec.evalJob || spec.predictJob).device || 'auto';
  return '';
}
const jobName = (job) => (job.spec || {}).name || '';
const jobLabels = (job) => Object.entries((job.spec || {}).labels || {}).sort().map(([k, v]) => `${k}=${v}`).join(' ');

// A progress cell's text and fraction: steps for a TrainJob (with an ETA while running), rows
// for a BenchJob, finished trials for a sweep.
function progressOf(job) {
  if (job.kind === 'BENCH_JOB') {
    const rows = ((job.summary || {}).benchRows || []).length;
    return { text: rows ? `${rows} rows` : '' };
  }
  if (job.kind === 'SWEEP') {
    const total = (job.trialJobIds || []).length;
    return { text: total ? `${total} trials` : '' };
  }
  const step = num((job.lastStep || {}).step);
  const total = num((job.lastStep || {}).totalSteps);
  if (!total) return { text: job.state === 'SUCCEEDED' ? '100%' : '' };
  const fraction = Math.min(1, step / total);
  let eta = '';
  if (job.state === 'RUNNING' && step > 0 && job.startedAt) {
    const elapsed = Date.now() / 1000 - seconds(job.startedAt);
    eta = ' · ETA ' + fmtDuration(elapsed / fraction - elapsed);
  }
  return { text: `${step}/${total}${eta}`, fraction };
}

function progressCell(job) {
  const p = progressOf(job);
  if (p.fraction === undefined) return el('td', {}, p.text);
  return el('td', {}, el('div', { class: 'progress', title: p.text },
    el('div', { style: `width:${(p.fraction * 100).toFixed(1)}%` }), el('span', {}, p.text)));
}

// What a row shows, as one string: a row is rebuilt only when this changes.
function rowSignature(job) {
  const last = job.lastStep || {};
  const summary = job.summary || {};
  return [job.state, last.step, last.totalSteps, last.samplesPerSecond, last.loss, jobAccuracy(job, 'test'), jobAccuracy(job, 'val'),
    (job.lastEpoch || {}).epoch, jobDevice(job), (summary.benchRows || []).length, (job.trialJobIds || []).length,
    job.state === 'RUNNING' ? Math.floor(Date.now() / 10000) : ''].join('|');
}

// A job's accuracy on `split` (val or test), from its summary once it finished, else its newest
// epoch; undefined when not measured. Multilabel's is in the metrics map; a regression has none.
function jobAccuracy(job, split) {
  const summary = job.summary || {}, epoch = job.lastEpoch || {};
  let v;
  if (jobTask(job) !== 'classification') {
    const key = split + '_accuracy';
    v = (summary.metrics || {})[key] !== undefined ? summary.metrics[key] : (epoch.metrics || {})[key];
  } else if (split === 'val') {
    v = summary.valAccuracy !== undefined ? summary.valAccuracy : epoch.valAccuracy;
  } else {
    v = summary.testAccuracy !== undefined ? summary.testAccuracy : (epoch.evaluated ? epoch.testAccuracy : undefined);
  }
  return v === undefined ? undefined : num(v);
}

function jobCells(job, selected, onSelect) {
  const last = job.lastStep || {};
  const valAccuracy = jobAccuracy(job, 'val');
  const testAccuracy = jobAccuracy(job, 'test');
  const age = fmtDuration(Date.now() / 1000 - seconds(job.createdAt));
  const checkbox = el('input', { type: 'checkbox', 'aria-label': 'select for compare', onclick: (e) => { e.stopPropagation(); onSelect(job.id, e.target.checked); } });
  checkbox.checked = selected;
  const labels = Object.entries((job.spec || {}).labels || {}).sort().map(([k, v]) => el('span', { class: 'label' }, `${k}=${v}`));
  return [
    el('td', {}, checkbox),
    el('td', { class: 'num' }, jobLink(job.id)),
    el('td', { class: 'name' }, jobName(job)),
    el('td', { class: 'labels hide-narrow' }, labels),
    el('td', { class: 'hide-narrow' }, kindName(job)),
    el('td', {}, jobModel(job)),
    el('td', { class: 'hide-narrow' }, jobDataset(job)),
    el('td', {}, stateBadge(job)),
    progressCell(job),
    el('td', { class: 'hide-narrow' }, jobDevice(job)),
    el('td', { class: 'num hide-narrow' }, last.samplesPerSecond ? num(last.samplesPerSecond).toFixed(0) : ''),
    el('td', { class: 'num' }, last.loss !== undefined ? fmt(num(last.loss), 4) : ''),
    el('td', { class: 'num' }, valAccuracy !== undefined ? (100 * valAccuracy).toFixed(2) + '%' : ''),
    el('td', { class: 'num' }, testAccuracy !== undefined ? (100 * testAccuracy).toFixed(2) + '%' : ''),
    el('td', { class: 'hide-narrow' }, job.submittedBy || ''),
    el('td', { class: 'num hide-narrow' }, age),
  ];
}

// Whether `job` passes the table's filters: state, kind, a name glob (* and ?), labels k=v.
function globRegExp(glob) {
  return new RegExp('^' + glob.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.') + '$');
}

function jobsPage(ctx, main, params) {
  const selected = new Set();
  let jobs = new Map();  // id -> job
  // id -> { tr, signature }: rows built once and updated in place when their job changes, so
  // an idle poll touches nothing and a text selection in the table survives.
  const rowsById = new Map();
  let timer = null;
  let page = Math.max(0, num(params.get('page')));
  const stateFilter = el('select', { id: 'filter-state' }, el('option', { value: '' }, 'any state'),
    ['QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED', 'INTERRUPTED'].map((s) => el('option', { value: s }, s.toLowerCase())));
  const kindFilter = el('select', { id: 'filter-kind' }, el('option', { value: '' }, 'any kind'),
    ['TrainJob', 'BenchJob', 'EvalJob', 'PredictJob', 'Sweep'].map((k) => el('option', { value: k }, k)));
  const nameFilter = el('input', { id: 'filter-name', size: 12, placeholder: 'name glob' });
  const labelFilter = el('input', { id: 'filter-label', size: 14, placeholder: 'key=value' });
  // Created within the last hour, day or week (as mpsctl list --since).
  const sinceFilter = el('select', { id: 'filter-since' }, el('option', { value: '' }, 'any time'),
    [['1h', 'last hour'], ['24h', 'last day'], ['168h', 'last week']].map(([v, t]) => el('option', { value: v }, t)));
  sinceFilter.value = params.get('since') || '';
  stateFilter.value = params.get('state') || '';
  kindFilter.value = params.get('kind') || '';
  nameFilter.value = params.get('name') || '';
  labelFilter.value = params.get('label') || '';
  const compare = el('button', { id: 'compare', disabled: true, onclick: () => { location.hash = '#/compare?ids=' + [...selected].join(','); } }, 'Compare selected');
  const count = el('span', { class: 'muted', id: 'job-count' });
  const prev = el('button', { id: 'page-prev', onclick: () => { page--; render(); } }, '‹ newer');
  const next = el('button', { id: 'page-next', onclick: () => { page++; render(); } }, 'older ›');
  const tbody = el('tbody', { id: 'jobs-body' });
  const headers = [['', ''], ['id', 'num'], ['name', ''], ['labels', 'hide-narrow'], ['kind', 'hide-narrow'], ['model', ''],
    ['dataset', 'hide-narrow'], ['state', ''], ['progress', ''], ['device', 'hide-narrow'], ['samples/s', 'num hide-narrow'],
    ['loss', 'num'], ['val acc', 'num'], ['test acc', 'num'], ['submitted by', 'hide-narrow'], ['age', 'num hide-narrow']];
  // Sorting by any column (click its header; again to reverse), kept in the URL (sort=, asc=1).
  const sortKeys = {
    id: (j) => num(j.id), name: jobName, labels: jobLabels, kind: kindName, model: jobModel, dataset: jobDataset,
    state: (j) => j.state, progress: (j) => progressOf(j).fraction, device: jobDevice,
    'samples/s': (j) => ((j.lastStep || {}).samplesPerSecond === undefined ? undefined : num(j.lastStep.samplesPerSecond)),
    loss: (j) => ((j.lastStep || {}).loss === undefined ? undefined : num(j.lastStep.loss)),
    'val acc': (j) => jobAccuracy(j, 'val'),
    'test acc': (j) => jobAccuracy(j, 'test'),
    'submitted by': (j) => j.submittedBy || '', age: (j) => -seconds(j.createdAt),
  };
  let sortBy = sortKeys[params.get('sort')] ? params.get('sort') : 'id';
  let ascending = params.get('asc') === '1';
  main.append(el('h1', {}, 'Jobs'),
    el('div', { class: 'toolbar' }, el('label', {}, 'State ', stateFilter), el('label', {}, 'Kind ', kindFilter),
      el('label', {}, 'Name ', nameFilter), el('label', {}, 'Labels ', labelFilter), el('label', {}, 'Created ', sinceFilter), compare, count, prev, next),
    el('div', { class: 'card scroll' }, el('table', { id: 'jobs' },
      el('thead', {}, el('tr', {}, headers.map(([h, c]) => (sortKeys[h] ? el('th', { class: c + ' sortable', 'data-sort': h, onclick: () => {
        ascending = sortBy === h ? !ascending : h === 'name' || h === 'model' || h === 'kind';
        sortBy = h;
        page = 0;
        render();
      } }, h) : el('th', { class: c }, h))))), tbody)));

  function onSelect(id, on) {
    on ? selected.add(id) : selected.delete(id);
    compare.disabled = selected.size < 2;
  }
  function rowFor(job) {
    const signature = rowSignature(job);
    let row = rowsById.get(job.id);
    if (row && row.signature === signature) return row.tr;
    const cells = jobCells(job, selected.has(job.id), onSelect);
    if (!row) {
      const tr = el('tr', { class: 'job', 'data-job-id': job.id, onclick: (e) => {
        // A click that ends a text selection selects; one on a link or checkbox does its own.
        if (String(window.getSelection()) || e.target.closest('a,input')) return;
        location.hash = '#/jobs/' + job.id;
      } });
      row = { tr };
      rowsById.set(job.id, row);
    }
    row.tr.replaceChildren(...cells);
    row.signature = signature;
    ctx.counters.rowsBuilt = (ctx.counters.rowsBuilt || 0) + 1;
    return row.tr;
  }
  function filtered() {
    const wantState = stateFilter.value, wantKind = kindFilter.value;
    const name = nameFilter.value.trim() ? globRegExp(nameFilter.value.trim()) : null;
    const labels = labelFilter.value.split(/[\s,]+/).filter(Boolean).map((kv) => kv.split('='));
    const since = sinceFilter.value ? Date.now() / 1000 - 3600 * parseInt(sinceFilter.value, 10) : -Infinity;
    return [...jobs.values()].filter((job) => (!wantState || job.state === wantState) && (!wantKind || kindName(job) === wantKind) &&
      (!name || name.test(jobName(job))) && (!sinceFilter.value || seconds(job.createdAt) >= since) &&
      labels.every(([k, v]) => ((job.spec || {}).labels || {})[k] === v))
      .map((job) => ({ job, key: sortKeys[sortBy](job) }))
      .sort((a, b) => {
        // Jobs without a value last either way; ties newest first.
        const x = a.key, y = b.key;
        if ((x === undefined || x === '') !== (y === undefined || y === '')) return x === undefined || x === '' ? 1 : -1;
        if (x !== y && x !== undefined && x !== '') {
          const order = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
          if (order) return ascending ? order : -order;
        }
        return num(b.job.id) - num(a.job.id);
      }).map((entry) => entry.job);
  }
  // Shows the current page's rows, reusing the row of every job that did not change, and
  // moving DOM nodes only where the order changed.
  function render() {
    if (!ctx.alive) return;  // A poll answered after the page was left must not touch the URL.
    const t0 = performance.now();
    const rows = filtered();
    const pages = Math.max(1, Math.ceil(rows.length / PAGE_ROWS));
    page = Math.min(Math.max(0, page), pages - 1);
    const shown = rows.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS);
    const wanted = shown.map((job) => rowFor(job));
    let cursor = tbody.firstChild;
    for (const tr of wanted) {
      if (tr === cursor) { cursor = cursor.nextSibling; continue; }
      tbody.insertBefore(tr, cursor);
    }
    while (cursor) { const nextNode = cursor.nextSibling; cursor.remove(); cursor = nextNode; }
    const first = rows.length ? page * PAGE_ROWS + 1 : 0;
    count.textContent = `${first}–${page * PAGE_ROWS + shown.length} of ${rows.length} jobs` + (rows.length !== jobs.size ? ` (${jobs.size} in all)` : '');
    prev.disabled = page === 0;
    next.disabled = page >= pages - 1;
    replaceHash('/', new URLSearchParams({ state: stateFilter.value, kind: kindFilter.value, name: nameFilter.value.trim(),
      label: labelFilter.value.trim(), since: sinceFilter.value, page: page ? String(page) : '', sort: sortBy === 'id' ? '' : sortBy, asc: ascending ? '1' : '' }));
    for (const th of main.querySelectorAll('th.sortable')) {
      th.classList.toggle('sorted-asc', th.dataset.sort === sortBy && ascending);
      th.classList.toggle('sorted-desc', th.dataset.sort === sortBy && !ascending);
    }
    ctx.counters.rendered = (ctx.counters.rendered || 0) + 1;
    ctx.counters.lastRenderMs = performance.now() - t0;
  }
  for (const input of [stateFilter, kindFilter, sinceFilter]) input.addEventListener('change', () => { page = 0; render(); });
  for (const input of [nameFilter, labelFilter]) input.addEventListener('input', () => { page = 0; render(); });

  // Everything once, then only the jobs that can still change (queued, running) every 2 s;
  // the whole list again only when that set changes (a job finished, or a new one came).
  async function loadAll() {
    const all = [];
    let pageToken = '';
    do {
      const response = await api('api/jobs?page_size=1000' + (pageToken ? '&page_token=' + encodeURIComponent(pageToken) : ''));
      all.push(...(response.jobs || []));
      pageToken = response.nextPageToken || '';
    } while (pageToken);
    jobs = new Map(all.map((job) => [job.id, job]));
    for (const id of [...rowsById.keys()]) if (!jobs.has(id)) rowsById.delete(id);
    render();
    ctx.counters.loaded = performance.now();
  }
  async function refreshActive() {
    const response = await api('api/jobs?page_size=1000&state=QUEUED,RUNNING');
    const active = response.jobs || [];
    const known = [...jobs.values()].filter((job) => !TERMINAL.has(job.state)).map((j) => j.id).sort().join();
    const now = active.map((j) => j.id).sort().join();
    if (known !== now) return loadAll();
    if (!active.length) { ctx.counters.idlePolls = (ctx.counters.idlePolls || 0) + 1; return; }
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
    if (ctx.alive) timer = setTimeout(tick, POLL_MS);
  }
  loadAll().then(() => { if (ctx.alive) timer = setTimeout(tick, POLL_MS); }, (error) => {
    if (!(error instanceof HttpError && error.status === 401)) banner('Cannot list jobs: ' + error.message, true);
  });
  return { leave() { clearTimeout(timer); } };
}

// ---------------------------------------------------------------------------------------------
// Charts.

// TensorBoard's smoothing, the same formula as the server's (server/http/series.h, Ema): an
// exponential moving average debiased for its first points, from
// tensorboard/components/vz_line_chart2/line-chart.ts (resmoothDataset):
//   last = last * w + (1 - w) * v;  n += 1;  smoothed = last / (1 - w^n).
// The server smooths every point of a series (not its thinned points) and returns the state
// after its last one; a page continues from that state over the steps that arrive live.
class Ema {
  constructor(weight, last = 0, count = 0) { this.weight = weight; this.last = last; this.count = count; }
  add(v) {
    if (!Number.isFinite(v)) return v;
    this.last = this.last * this.weight + (1 - this.weight) * v;
    this.count++;
    return this.weight === 0 ? v : this.last / (1 - this.weight ** this.count);
  }
}

// Chart colours from the page's theme (style.css: light, or dark when the system is).
function themeOptions() {
  const css = getComputedStyle(document.documentElement);
  const color = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  return { gridLineColor: color('--grid', '#e5e8eb'), axisLineColor: color('--muted', '#6b7580') };
}

function chart(container, labels, options = {}) {
  const empty = [new Array(labels.length).fill(null)];
  empty[0][0] = 0;
  const graph = new Dygraph(container, empty, {
    labels, colors: COLORS, legend: 'always', labelsSeparateLines: false, connectSeparatedPoints: true,
    animatedZooms: false, strokeWidth: 1.3, axisLabelFontSize: 11, ...themeOptions(),
    labelsDiv: options.labelsDiv, ...options,
  });
  return graph;
}

// ---------------------------------------------------------------------------------------------
// CSV and PNG of a chart.

function download(filename, blob) {
  const a = el('a', { href: URL.createObjectURL(blob), download: filename });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

// The chart's data as CSV (RFC 4180): a header of its labels, one line per row, empty cells
// where a series has no value; bars (BenchJob) as their median.
function chartCsv(graph) {
  const quote = (v) => (/[",\n]/.test(v) ? '"' + v.replace(/"/g, '""') + '"' : v);
  if (graph instanceof LiveChart) {  // Every row, not only the ones drawn.
    const cell = (v) => (v === null || v === undefined || Number.isNaN(v) ? '' : String(v));
    return [graph.labels.map(quote).join(','), ...graph.rows.map((r) => r.map(cell).join(','))].join('\n') + '\n';
  }
  const labels = graph.getLabels();
  const lines = [labels.map(quote).join(',')];
  for (let r = 0; r < graph.numRows(); r++) {
    const cells = [];
    for (let c = 0; c < labels.length; c++) {
      let v = graph.getValue(r, c);
      if (Array.isArray(v)) v = v[1];
      cells.push(v === null || v === undefined || Number.isNaN(v) ? '' : String(v));
    }
    lines.push(cells.join(','));
  }
  return lines.join('\n') + '\n';
}

// The chart as a PNG: its plot canvas with the axis labels drawn over it, on the card's colour.
function chartPng(graph) {
  const div = graph.graphDiv;
  const box = div.getBoundingClientRect();
  const scale = window.devicePixelRatio || 1;
  const canvas = document.createElement('canvas');
  canvas.width = Math.round(box.width * scale);
  canvas.height = Math.round(box.height * scale);
  const ctx = canvas.getContext('2d');
  ctx.scale(scale, scale);
  const css = getComputedStyle(document.documentElement);
  ctx.fillStyle = css.getPropertyValue('--card').trim() || '#fff';
  ctx.fillRect(0, 0, box.width, box.height);
  ctx.drawImage(graph.hidden_, 0, 0, box.width, box.height);
  ctx.fillStyle = css.getPropertyValue('--fg').trim() || '#000';
  for (const label of div.querySelectorAll('.dygraph-axis-label, .dygraph-label')) {
    const r = label.getBoundingClientRect();
    if (!label.textContent || !r.width) continue;
    const style = getComputedStyle(label);
    ctx.font = `${style.fontSize} ${style.fontFamily}`;
    ctx.textBaseline = 'top';
    if (label.closest('.dygraph-ylabel, .dygraph-y2label')) {
      ctx.save();
      ctx.translate(r.left - box.left, r.bottom - box.top);
      ctx.rotate(-Math.PI / 2);
      ctx.fillText(label.textContent, (r.height - ctx.measureText(label.textContent).width) / 2, 0);
      ctx.restore();
    } else {
      ctx.fillText(label.textContent, r.left - box.left, r.top - box.top);
    }
  }
  return new Promise((resolve) => canvas.toBlob(resolve, 'image/png'));
}

// CSV and PNG buttons on a chart card; getGraph() gives its Dygraph once drawn.
function attachDownloads(card, getGraph, name) {
  const csv = el('button', { class: 'csv', title: 'the chart\'s data as CSV', onclick: () => {
    const g = getGraph();
    if (g) download(name + '.csv', new Blob([chartCsv(g)], { type: 'text/csv' }));
  } }, 'CSV');
  const png = el('button', { class: 'png', title: 'the chart as a PNG image', onclick: async () => {
    const g = getGraph();
    if (g) download(name + '.png', await chartPng(g instanceof LiveChart ? g.graph : g));
  } }, 'PNG');
  card.card.querySelector('h2').append(el('span', { class: 'chart-actions' }, csv, png));
}

// Redraws of all charts share one scheduler: a chart that got rows is drawn at most every
// REDRAW_MS, and each chart in its own task, so that a page following a fast job never blocks
// the main thread for more than one chart's draw.
const redraws = { dirty: new Set(), timer: null, last: 0 };
function scheduleRedraw(liveChart) {
  redraws.dirty.add(liveChart);
  if (redraws.timer) return;
  const wait = Math.max(0, redraws.last + REDRAW_MS - performance.now());
  redraws.timer = setTimeout(function drawNext() {
    const [next] = redraws.dirty;
    if (!next) { redraws.timer = null; redraws.last = performance.now(); return; }
    redraws.dirty.delete(next);
    next.draw();
    redraws.timer = setTimeout(drawNext, 0);
  }, wait);
}

// One chart's rows: appending a row costs O(1); the chart redraws through the scheduler
// above, keeping the user's zoom (Dygraphs keeps dateWindow/valueRange across
// updateOptions({file})).
class LiveChart {
  constructor(container, labels, options = {}) {
    this.rows = [];
    this.labels = labels;
    // A zoom (or its reset) redraws: the window at full resolution.
    this.graph = chart(container, labels, { ...options, zoomCallback: () => { if (this.rows.length > DRAW_ROWS) scheduleRedraw(this); } });
    this.drawn = false;
  }
  set(rows) { this.rows = rows; this.changed(); }
  push(row) { this.rows.push(row); this.changed(); }
  // Drops the rows at x and above (a resumed job reports those steps again).
  truncateFrom(x) {
    while (this.rows.length && this.rows[this.rows.length - 1][0] >= x) this.rows.pop();
    this.changed();
  }
  changed() {
    if (!this.drawn && this.rows.length) { this.draw(); return; }  // The first draw at once.
    scheduleRedraw(this);
  }
  draw() {
    if (!this.rows.length) return;
    // What Dygraphs draws: every row up to DRAW_ROWS; beyond, the rows thinned as the server
    // thins a series (thinRows), so that a redraw of a 20,000-step job costs as little as one of
    // 4,000 steps. Zoomed in, the rows in view at full resolution (thinned only if still too
    // many). The data (this.rows, CSV) stays complete.
    let rows = this.rows;
    const range = this.drawn && this.graph.isZoomed('x') ? this.graph.xAxisRange() : null;
    if (range && !this.mapX) {
      const lo = lowerBound(rows, range[0]), hi = lowerBound(rows, range[1]);
      rows = rows.slice(Math.max(0, lo - 1), Math.min(rows.length, hi + 1));
    }
    if (rows.length > DRAW_ROWS) rows = thinRows(rows, DRAW_ROWS);
    // mapX (the job page's x = time): each row's x mapped, a copy per draw.
    if (this.mapX) rows = rows.map((r) => [this.mapX(r[0]), ...r.slice(1)]);
    this.graph.updateOptions({ file: rows });
    this.drawnRows = rows.length;
    this.lastDrawnX = this.rows[this.rows.length - 1][0];
    this.lastDrawAt = Date.now();
    if (!this.drawn) { this.drawn = true; if (this.onFirstDraw) this.onFirstDraw(); }
  }
  numRows() { return this.rows.length; }
}

// Rows a chart draws at most (LiveChart.draw).
const DRAW_ROWS = 4000;

// The index of the first row whose x is >= x (rows sorted by x).
function lowerBound(rows, x) {
  let lo = 0, hi = rows.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (rows[mid][0] < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// At most about `limit` of `rows` (sorted by x), as the series endpoint thins (server/http/
// series.h, after M4): the first row, then in each of equal runs of rows the ones holding any
// column's minimum or maximum, and the run's last row, in order. Spikes survive; O(rows).
function thinRows(rows, limit) {
  const columns = rows[0].length;
  const perBucket = 2 * (columns - 1) + 1;
  const buckets = Math.max(1, Math.floor((limit - 1) / perBucket));
  const out = [rows[0]];
  const rest = rows.length - 1;
  for (let b = 0; b < buckets; b++) {
    const begin = 1 + Math.floor((rest * b) / buckets), end = 1 + Math.floor((rest * (b + 1)) / buckets);
    if (begin >= end) continue;
    const picks = new Set([end - 1]);
    for (let c = 1; c < columns; c++) {
      let min = -1, max = -1;
      for (let i = begin; i < end; i++) {
        const v = rows[i][c];
        if (v === null || !Number.isFinite(v)) continue;
        if (min < 0 || v < rows[min][c]) min = i;
        if (max < 0 || v > rows[max][c]) max = i;
      }
      if (min >= 0) { picks.add(min); picks.add(max); }
    }
    for (const i of [...picks].sort((x, y) => x - y)) out.push(rows[i]);
  }
  return out;
}

// Rows [x, a, b] from two series of [x, value] sorted by x (null where one has no point).
function mergeByX(a, b) {
  const rows = [];
  let i = 0, j = 0;
  while (i < a.length || j < b.length) {
    const xa = i < a.length ? a[i][0] : Infinity, xb = j < b.length ? b[j][0] : Infinity;
    if (xa === xb) rows.push([xa, a[i++][1], b[j++][1]]);
    else if (xa < xb) rows.push([xa, a[i++][1], null]);
    else rows.push([xb, null, b[j++][1]]);
  }
  return rows;
}

function chartCard(title, id, extra) {
  const box = el('div', { class: 'chart', id });
  const legend = el('div', { class: 'muted legend' });
  const note = el('p', { class: 'muted chart-note', id: id + '-note', hidden: true });
  return { card: el('div', { class: 'card' }, el('h2', {}, title), extra || null, note, box, legend), box, legend, note };
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
  const trial = job.trial || {};
  const progress = progressOf(job);
  return facts([
    ['state', el('span', { class: 'state state-' + job.state, id: 'job-state', title: job.message || '' },
      job.state + (job.failureReason ? ' (' + job.failureReason + ')' : ''))],
    ['name', jobName(job)], ['labels', jobLabels(job)],
    ['kind', kindName(job)], ['model', jobModel(job)], ['dataset', jobDataset(job)], ['device', jobDevice(job)],
    ['sweep', trial.sweepId ? el('span', {}, jobLink(trial.sweepId, 'job ' + trial.sweepId), ` trial ${num(trial.index)}`) : ''],
    ['step', last.totalSteps ? el('span', { id: 'job-step' }, progress.text) : ''],
    ['epoch', (job.lastEpoch || {}).epoch ? String(job.lastEpoch.epoch) : ''],
    ['samples/s', last.samplesPerSecond ? num(last.samplesPerSecond).toFixed(0) : ''],
    ['submitted by', job.submittedBy || ''],
    ['created', job.createdAt ? new Date(job.createdAt).toLocaleString() : ''],
    ['task', job.spec && job.spec.trainJob && jobTask(job) !== 'classification' ? jobTask(job) : ''],
    ...(jobTask(job) === 'classification' ? [
      ['val accuracy', summary.valAccuracy !== undefined ? (100 * num(summary.valAccuracy)).toFixed(2) + '%' : ''],
      ['test accuracy', summary.testAccuracy !== undefined ? (100 * num(summary.testAccuracy)).toFixed(2) + '%' : ''],
      // The user's metrics (TrainJob.metrics): the map's figures the fields above do not carry.
      ...Object.entries(metricNumbers(summary.metrics)).filter(([k]) => !k.startsWith('train_') && !/^(val|test)_(loss|accuracy)$/.test(k)).sort()
        .map(([k, v]) => [metricLabel(k), el('span', { class: 'task-metric', 'data-metric': k }, fmt(v, 4))])]
      : Object.entries(metricNumbers(summary.metrics)).filter(([k]) => !k.startsWith('train_')).sort()
        .map(([k, v]) => [metricLabel(k), el('span', { class: 'task-metric', 'data-metric': k }, fmt(v, 4))])),
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
  let leaveView = null;
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
  // The header follows the steps as they arrive, at most once a second.
  let headDue = false;
  function onStep(step) {
    job.lastStep = step;
    if (headDue) return;
    headDue = true;
    setTimeout(() => { headDue = false; if (ctx.alive) showHead(); }, 1000);
  }

  api(`api/jobs/${encodeURIComponent(jobId)}`).then((loaded) => {
    job = loaded;
    showHead();
    if (job.kind === 'BENCH_JOB') benchView(ctx, body, job, (f) => { follower = f; }, refresh);
    else if (job.kind === 'SWEEP') leaveView = sweepView(ctx, body, job, refresh);
    else trainView(ctx, body, job, (f) => { follower = f; }, refresh, live, onStep);
  }, (error) => {
    if (!(error instanceof HttpError && error.status === 401)) main.append(el('p', { class: 'error', id: 'page-error' }, `Job ${jobId}: ${error.message}`));
  });

  // The facts at the top follow the job's row, refreshed when a state change arrives.
  async function refresh() {
    try { job = await api(`api/jobs/${encodeURIComponent(jobId)}`); showHead(); } catch (e) { /* next event retries */ }
    return job;
  }
  return { leave() { follower && follower.stop(); leaveView && leaveView(); } };
}

function trainView(ctx, body, job, setFollower, refresh, live, onStep) {
  const smoothing = el('input', { type: 'range', min: '0', max: '0.99', step: '0.01', value: '0.6', id: 'smoothing' });
  const smoothingValue = el('span', {}, '0.6');
  const logScale = el('input', { type: 'checkbox', id: 'loss-log' });
  const xAxis = el('select', { id: 'job-x' }, el('option', { value: 'step' }, 'step'), el('option', { value: 'relative' }, 'time since start'),
    el('option', { value: 'wall' }, 'wall time'));
  const loss = chartCard('Loss per step', 'chart-loss', el('div', { class: 'toolbar' },
    el('label', {}, 'Smoothing (EMA) ', smoothing), smoothingValue, el('label', {}, logScale, ' log scale'), el('label', {}, 'x ', xAxis)));
  const epochLoss = chartCard('Loss per epoch', 'chart-epoch-loss');
  // The epoch metrics chart: accuracy for classification, the task's own metrics otherwise
  // (multilabel: accuracy and macro F1; regression: MSE and MAE, R² on the right axis).
  const task = jobTask(job);
  const TASK_EPOCH_METRICS = {
    classification: ['train_accuracy', 'val_accuracy', 'test_accuracy'],
    multilabel: ['train_accuracy', 'val_accuracy', 'test_accuracy', 'val_macro_f1', 'test_macro_f1'],
    regression: ['val_mse', 'test_mse', 'val_mae', 'test_mae', 'val_r2', 'test_r2'],
  };
  const epochMetricKeys = TASK_EPOCH_METRICS[task] || TASK_EPOCH_METRICS.classification;
  const epochAcc = task === 'classification' ? chartCard('Accuracy per epoch', 'chart-epoch-accuracy')
    : chartCard(`${task === 'regression' ? 'Regression' : 'Multilabel'} metrics per epoch`, 'chart-epoch-metrics');
  const lr = chartCard('Learning rate', 'chart-lr');
  const speed = chartCard('Samples/s and step time', 'chart-speed');
  const memory = chartCard('Device memory allocated', 'chart-memory');
  const usage = chartCard('Executor CPU, memory and GPU', 'chart-usage');
  const logs = el('div', { class: 'log', id: 'log' });
  const yaml = el('pre', { id: 'spec-yaml' }, specYaml(job));
  const artifacts = el('div', { class: 'scroll', id: 'artifacts' }, el('p', { class: 'muted' }, 'None yet.'));
  body.append(el('div', { class: 'grid' }, loss.card, epochLoss.card, epochAcc.card, lr.card, speed.card, memory.card, usage.card),
    el('div', { class: 'grid', style: 'margin-top:1em' },
      el('div', { class: 'card' }, el('h2', {}, 'Log and state changes'), logs),
      el('div', { class: 'card' }, el('h2', {}, 'Artifacts'), artifacts),
      el('div', { class: 'card' }, el('h2', {}, 'Job file'),
        el('p', { class: 'muted' }, 'The spec as a job file to submit again (without request_id, which would return this job).'), yaml)));

  // Epoch charts span the job's epochs from the start, so that one point is not a lone dot
  // at the edge; points are drawn, as there are few.
  const epochCount = num((job.spec.trainJob || {}).epochs) || 1;
  const epochAxis = { drawPoints: true, pointSize: 3, dateWindow: [0.8, epochCount + 0.2],
    axes: { x: { pixelsPerLabel: 30, axisLabelFormatter: (x) => (Number.isInteger(x) ? String(x) : '') } } };
  const charts = {
    loss: new LiveChart(loss.box, ['step', 'loss', 'smoothed'], { labelsDiv: loss.legend, xlabel: 'step',
      series: { loss: { color: 'rgba(31,111,235,0.35)', strokeWidth: 1 }, smoothed: { color: '#1f6feb', strokeWidth: 2 } } }),
    epochLoss: new LiveChart(epochLoss.box, ['epoch', 'train loss', 'val loss', 'test loss'], { labelsDiv: epochLoss.legend, xlabel: 'epoch', ...epochAxis }),
    epochAccuracy: task === 'classification'
      ? new LiveChart(epochAcc.box, ['epoch', 'train accuracy', 'val accuracy', 'test accuracy'], { labelsDiv: epochAcc.legend, xlabel: 'epoch', ...epochAxis })
      : new LiveChart(epochAcc.box, ['epoch', ...epochMetricKeys.map(metricLabel)], { labelsDiv: epochAcc.legend, xlabel: 'epoch', ...epochAxis,
        ...(task === 'regression' ? { series: { 'val R²': { axis: 'y2' }, 'test R²': { axis: 'y2' } }, y2label: 'R²', axes: { ...epochAxis.axes, y2: { independentTicks: true } } } : {}) }),
    learningRate: new LiveChart(lr.box, ['step', 'learning rate'], { labelsDiv: lr.legend, xlabel: 'step', includeZero: true,
      axes: { y: { valueFormatter: fmtSci, axisLabelFormatter: fmtSci, axisLabelWidth: 60 } } }),
    speed: new LiveChart(speed.box, ['step', 'samples/s', 'step ms'], { labelsDiv: speed.legend, xlabel: 'step',
      series: { 'step ms': { axis: 'y2' } }, axes: { y2: { independentTicks: true } }, ylabel: 'samples/s', y2label: 'ms' }),
    memory: new LiveChart(memory.box, ['step', 'allocated'], { labelsDiv: memory.legend, xlabel: 'step', includeZero: true,
      axes: { y: { valueFormatter: fmtBytes, axisLabelFormatter: fmtBytes, ticker: byteTicks, axisLabelWidth: 64 } } }),
  };
  charts.usage = new LiveChart(usage.box, ['seconds', 'CPU %', 'GPU %', 'resident memory'], { labelsDiv: usage.legend, xlabel: 'seconds since start',
    includeZero: true, ylabel: '%', series: { 'resident memory': { axis: 'y2' } },
    axes: { y2: { independentTicks: true, valueFormatter: fmtBytes, axisLabelFormatter: fmtBytes, ticker: byteTicks, axisLabelWidth: 64 } } });
  Object.assign(ctx.charts, charts);
  for (const [card, key, name] of [[loss, 'loss', 'loss'], [epochLoss, 'epochLoss', 'epoch-loss'], [epochAcc, 'epochAccuracy', 'epoch-accuracy'],
    [lr, 'learningRate', 'learning-rate'], [speed, 'speed', 'speed'], [memory, 'memory', 'memory'], [usage, 'usage', 'usage']]) {
    attachDownloads(card, () => charts[key], `job-${job.id}-${name}`);
  }
  logScale.addEventListener('change', () => charts.loss.graph.updateOptions({ logscale: logScale.checked }));
  // x of the step charts: the step, the seconds since the job started, or the wall clock; each
  // step's time from the series' points and the streamed events.
  const timeOfStep = new Map();  // step -> microseconds since the epoch
  const stepCharts = () => [charts.loss, charts.learningRate, charts.speed, charts.memory];
  function applyXAxis() {
    const start = seconds(job.startedAt) * 1e6 || 0;
    const mode = xAxis.value;
    const mapX = mode === 'step' ? null : mode === 'relative' ? (x) => (timeOfStep.has(x) ? (timeOfStep.get(x) - start) / 1e6 : null)
      : (x) => (timeOfStep.has(x) ? new Date(timeOfStep.get(x) / 1000) : null);
    const xlabel = mode === 'step' ? 'step' : mode === 'relative' ? 'seconds since start' : 'time';
    for (const c of stepCharts()) {
      c.mapX = mapX;
      // Date objects as x make Dygraphs switch to its date axis and back (parseArray_).
      c.graph.updateOptions({ xlabel, dateWindow: null });
      c.draw();
    }
    ctx.counters.xAxis = mode;
  }
  xAxis.addEventListener('change', applyXAxis);

  // Device memory: mpsd measures it on CUDA and MPS only. On the CPU the chart would be a
  // line at zero: the card says so instead.
  let memorySeen = false;
  function showMemoryNote() {
    const cpu = jobDevice(job) === 'cpu';
    memory.note.hidden = memorySeen;
    memory.box.hidden = !memorySeen;
    memory.legend.hidden = !memorySeen;
    memory.note.textContent = cpu ? 'not tracked on cpu' : 'no device memory reported (not tracked on cpu)';
    if (memorySeen) charts.memory.graph.resize();
  }
  showMemoryNote();

  // The step curves: first the series endpoint's (downsampled beyond max_points with every
  // spike kept, the smoothing computed server-side over every step); then the steps streamed
  // after its throughSeq, appended one row each. A resume (a step at or below the last one)
  // drops the rows it replaces and reloads the series, whose smoothing covers the new attempt.
  const STEP_SERIES = ['loss', 'learning_rate', 'samples_per_second', 'step_time_ms', 'allocated_bytes'];
  let throughSeq = 0;
  let lastX = 0;
  let smoother = new Ema(0.6);
  let loading = null;
  const liveSteps = [];  // Steps with seq > throughSeq, for a reload.

  function appendStep(s) {
    if (s.x <= lastX) {  // A resumed attempt: the latest wins.
      for (const c of [charts.loss, charts.learningRate, charts.speed, charts.memory]) c.truncateFrom(s.x);
      reloadSteps();
    }
    lastX = s.x;
    charts.loss.push([s.x, s.loss, smoother.add(s.loss)]);
    charts.learningRate.push([s.x, s.lr]);
    charts.speed.push([s.x, s.sps, s.ms]);
    charts.memory.push([s.x, s.mem]);
    if (s.mem > 0 && !memorySeen) { memorySeen = true; showMemoryNote(); }
    ctx.counters.stepPoints = charts.loss.rows.length;
  }

  async function loadSteps() {
    const weight = Number(smoothing.value);
    const series = await api(`api/jobs/${encodeURIComponent(job.id)}/series?metric=${STEP_SERIES.join(',')}&max_points=4000&smoothing=${weight}`);
    const by = Object.fromEntries(series.series.map((s) => [s.metric, s]));
    throughSeq = num(series.throughSeq);
    smoother = new Ema(weight, by.loss.ema.last, by.loss.ema.count);
    for (const s of series.series) for (const p of s.points) timeOfStep.set(p[0], p[2]);
    for (const p of by.loss.smoothed) timeOfStep.set(p[0], p[2]);
    const points = (name) => by[name].points.map((p) => [p[0], p[1]]);
    charts.loss.rows = mergeByX(points('loss'), by.loss.smoothed.map((p) => [p[0], p[1]]));
    charts.learningRate.rows = points('learning_rate');
    charts.speed.rows = mergeByX(points('samples_per_second'), points('step_time_ms'));
    charts.memory.rows = points('allocated_bytes');
    if (by.allocated_bytes.points.some((p) => p[1] > 0)) memorySeen = true;
    showMemoryNote();
    const lossPoints = by.loss.points;
    lastX = lossPoints.length ? lossPoints[lossPoints.length - 1][0] : 0;
    const after = liveSteps.filter((s) => s.seq > throughSeq);
    liveSteps.length = 0;
    for (const s of after) { liveSteps.push(s); appendStep(s); }
    for (const c of [charts.loss, charts.learningRate, charts.speed, charts.memory]) c.changed();
    ctx.counters.stepPoints = charts.loss.rows.length;
    ctx.counters.seriesLoads = (ctx.counters.seriesLoads || 0) + 1;
    return series;
  }
  // One reload at a time; steps arriving meanwhile wait in liveSteps.
  function reloadSteps() {
    if (loading) { loading.again = true; return loading.promise; }
    loading = { again: false };
    loading.promise = loadSteps().catch((error) => banner('Cannot load the series: ' + error.message, true)).finally(() => {
      const again = loading.again;
      loading = null;
      if (again && ctx.alive) reloadSteps();
    });
    return loading.promise;
  }
  let smoothingTimer = null;
  smoothing.addEventListener('input', () => { smoothingValue.textContent = smoothing.value; });
  smoothing.addEventListener('change', () => {
    smoothingValue.textContent = smoothing.value;
    clearTimeout(smoothingTimer);
    smoothingTimer = setTimeout(reloadSteps, 100);
  });

  const epochs = new Map();
  function drawEpochs() {
    const rows = [...epochs.values()].sort((a, b) => a.epoch - b.epoch);
    const opt = (e, key) => (e[key] !== undefined ? num(e[key]) : null);
    charts.epochLoss.set(rows.map((e) => [e.epoch, num(e.trainLoss), opt(e, 'valLoss'), e.evaluated ? num(e.testLoss) : null]));
    // Only the lines that were measured (no "val" without a validation split).
    const visibility = [true, rows.some((e) => e.valLoss !== undefined), rows.some((e) => e.evaluated)];
    charts.epochLoss.graph.updateOptions({ visibility });
    if (task === 'classification') {
      charts.epochAccuracy.set(rows.map((e) => [e.epoch, num(e.trainAccuracy), opt(e, 'valAccuracy'), e.evaluated ? num(e.testAccuracy) : null]));
      charts.epochAccuracy.graph.updateOptions({ visibility });
    } else {
      const value = (e, k) => ((e.metrics || {})[k] !== undefined ? num(e.metrics[k]) : null);
      charts.epochAccuracy.set(rows.map((e) => [e.epoch, ...epochMetricKeys.map((k) => value(e, k))]));
      charts.epochAccuracy.graph.updateOptions({ visibility: epochMetricKeys.map((k) => rows.some((e) => value(e, k) !== null)) });
    }
    ctx.counters.epochPoints = rows.length;
  }
  function addLog(event) {
    let line = null;
    const time = event.time ? new Date(event.time).toLocaleTimeString() : '';
    if (event.log) line = el('div', { class: event.log.level || '' }, `${time} ${event.log.text}`);
    else if (event.state) line = el('div', { class: 'statechange' }, `${time} → ${event.state.state}${event.state.failureReason ? ' (' + event.state.failureReason + ')' : ''}${event.state.message ? ': ' + event.state.message : ''}`);
    else if (event.checkpoint) line = el('div', {}, `${time} checkpoint epoch ${event.checkpoint.epoch}: ${event.checkpoint.path} (${fmtBytes(event.checkpoint.sizeBytes)})`);
    else if (event.summary) {
      const taskMetrics = Object.entries(metricNumbers(event.summary.metrics)).filter(([k]) => k.startsWith('test_')).sort();
      const result = taskMetrics.length ? taskMetrics.map(([k, v]) => `${metricLabel(k)} ${fmt(v, 4)}`).join(', ')
        : event.summary.testAccuracy !== undefined ? `test accuracy ${(100 * num(event.summary.testAccuracy)).toFixed(2)}%` : 'test not evaluated';
      line = el('div', {}, `${time} summary: ${result}, ${num(event.summary.samplesPerSecond).toFixed(0)} samples/s`);
    }
    if (!line) return;
    const atBottom = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
    logs.append(line);
    if (atBottom) logs.scrollTop = logs.scrollHeight;
  }

  // The job's files (model, checkpoints, profiler trace), each downloaded through fetch() so that
  // the token goes in a header, never in a URL.
  async function showArtifacts() {
    let list;
    try { list = await api(`api/jobs/${encodeURIComponent(job.id)}/artifacts`); } catch (e) { return; }
    const files = list.artifacts || [];
    ctx.counters.artifacts = files.map((a) => a.name);
    if (!files.length) return;
    artifacts.replaceChildren(el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'file'), el('th', {}, 'kind'), el('th', { class: 'num' }, 'size'), el('th', {}, 'sha256'), el('th', {}, ''))),
      el('tbody', {}, files.map((a) => el('tr', { class: 'artifact' }, el('td', {}, a.name), el('td', {}, a.kind || ''),
        el('td', { class: 'num' }, fmtBytes(num(a.sizeBytes))), el('td', { class: 'muted', title: a.sha256 }, (a.sha256 || '').slice(0, 12) + '…'),
        el('td', {}, el('button', { class: 'download', onclick: () => downloadArtifact(a.name) }, 'Download')))))));
  }
  async function downloadArtifact(name) {
    try {
      const response = await fetch(`api/jobs/${encodeURIComponent(job.id)}/artifacts/${name.split('/').map(encodeURIComponent).join('/')}`,
        { headers: { Authorization: 'Bearer ' + token() }, cache: 'no-store' });
      if (!response.ok) throw new HttpError(response.status, await errorText(response));
      download(name.split('/').pop(), await response.blob());
    } catch (error) { banner(`Cannot download ${name}: ${error.message}`, true); }
  }
  showArtifacts();

  // What the executor used while the job ran, as this mpsd sampled it each second (CPU % of one
  // core and resident memory from /proc, GPU utilisation from NVML): polled while it runs.
  let usageTimer = null;
  async function showUsage() {
    let answer;
    try { answer = await api(`api/jobs/${encodeURIComponent(job.id)}/resources`); } catch (e) { answer = null; }
    if (!ctx.alive) return;
    const samples = (answer && answer.samples) || [];
    const start = samples.length ? samples[0][0] : 0;
    const anyGpu = samples.some((p) => p[3] !== null);
    charts.usage.set(samples.map(([t, cpu, rss, gpu]) => [(t - start) / 1e6, cpu, anyGpu && gpu !== null ? 100 * gpu : null, rss]));
    usage.note.hidden = samples.length > 0;
    usage.box.hidden = samples.length === 0;
    usage.legend.hidden = samples.length === 0;
    usage.note.textContent = 'not sampled: this mpsd did not run the job (samples are kept in memory while it runs)';
    if (samples.length) charts.usage.graph.resize();
    ctx.counters.usageSamples = samples.length;
    if (!TERMINAL.has(job.state)) usageTimer = setTimeout(showUsage, POLL_MS);
  }
  showUsage();

  charts.loss.onFirstDraw = () => { ctx.counters.firstChart = performance.now(); };
  reloadSteps().then(() => {
    if (!ctx.alive) return;
    const follower = followEvents(ctx, job.id, {
      afterSeq: 0, omitStepsThrough: throughSeq,
      onEvent: (event) => {
        const seq = num(event.seq);
        if (event.step) {
          if (seq > throughSeq) {
            const s = event.step;
            const step = { seq, x: num(s.step), loss: num(s.loss), lr: num(s.learningRate), sps: num(s.samplesPerSecond), ms: num(s.stepTimeMs), mem: num(s.allocatedBytes) };
            timeOfStep.set(step.x, Date.parse(event.time) * 1000);
            liveSteps.push(step);
            if (!loading) appendStep(step);
            ctx.counters.stepsStreamed = (ctx.counters.stepsStreamed || 0) + 1;
            onStep(s);
          }
        } else if (event.epoch) {
          epochs.set(num(event.epoch.epoch), { ...event.epoch, epoch: num(event.epoch.epoch) });
          drawEpochs();
        } else {
          addLog(event);
          if (event.state || event.summary) refresh().then((j) => { if (j) { job = j; showMemoryNote(); } });
          if (event.checkpoint || (event.state && TERMINAL.has(event.state.state))) showArtifacts();
        }
        ctx.counters.lastSeq = seq;
      },
      onStatus: (status, message) => {
        live.textContent = status === 'live' ? '● live' : status === 'reconnecting' ? 'reconnecting…' : status === 'ended' ? 'finished' : 'error: ' + message;
        ctx.counters.status = status;
      },
    });
    setFollower(follower);
  });
}

// ---------------------------------------------------------------------------------------------
// A sweep: its trials ranked by a metric, with the values each trial took as columns.

// A TrainJob's task (TrainJob.task; the summary's once resolved): classification, multilabel
// or regression (docs/job-files.md, "Tasks and losses").
function jobTask(job) {
  return (job.summary || {}).task || ((job.spec || {}).trainJob || {}).task || 'classification';
}

// A task metric's name for people: "val_r2" → "val R²", "test_macro_f1" → "test macro F1".
function metricLabel(name) {
  const [split, ...rest] = name.split('_');
  const metric = rest.join('_');
  const names = { r2: 'R²', mse: 'MSE', mae: 'MAE', macro_f1: 'macro F1', accuracy: 'acc', loss: 'loss' };
  return `${split} ${names[metric] || metric.replace(/_/g, ' ')}`;
}

// The metrics a sweep ranks by, as `mpsctl sweep --metric` (client/tables.h): accuracy and
// samples/s highest first, losses and times lowest first; a task's metrics (val_r2,
// test_macro_f1, val_mse, ...) as metricSpec says.
const SWEEP_METRICS = {
  // tieBreak: equal values go by this, lowest first (as mpsctl sweep: an accuracy by its loss).
  val_accuracy: { label: 'val acc', higher: true, pct: true, tieBreak: 'val_loss' },
  val_loss: { label: 'val loss', higher: false },
  test_accuracy: { label: 'test acc', higher: true, pct: true, tieBreak: 'test_loss' },
  test_loss: { label: 'test loss', higher: false },
  train_loss: { label: 'train loss', higher: false },
  samples_per_second: { label: 'samples/s', higher: true },
  time_s: { label: 'time', higher: false },
};

// How a metric is shown and ranked: SWEEP_METRICS' own, else a task metric's (higher is better
// for R², F1 and accuracy, lower for losses, MSE and MAE, as mpsctl ranks them); `higher` is
// undefined for a job's own metric (metrics: [{name, torchscript}]), whose direction only its
// author knows.
function metricSpec(name) {
  if (SWEEP_METRICS[name]) return SWEEP_METRICS[name];
  const higher = /_(r2|f1|accuracy)$/.test(name) ? true : /_(loss|mse|mae)$/.test(name) ? false : undefined;
  return { label: metricLabel(name), higher };
}

// A metrics map of the JSON mapping (JobSummary.metrics, EpochMetrics.metrics) as numbers.
function metricNumbers(map) {
  return Object.fromEntries(Object.entries(map || {}).map(([k, v]) => [k, num(v)]));
}

// A trial's metrics as mpsctl reads them: from its summary once it finished, else from its
// newest epoch; a figure never measured is undefined (ranked last), never 0.
function trialMetrics(job) {
  const s = job.summary || {};
  const m = {};
  const has = (v) => v !== undefined && v !== null;
  if (num(s.epochs) > 0) {
    for (const [key, field] of [['val_accuracy', 'valAccuracy'], ['val_loss', 'valLoss'], ['test_accuracy', 'testAccuracy'], ['test_loss', 'testLoss']]) {
      if (has(s[field])) m[key] = num(s[field]);
    }
    m.train_loss = num(s.finalTrainLoss);
    m.samples_per_second = num(s.samplesPerSecond);
    m.time_s = num(s.totalTimeS);
  } else if (job.lastEpoch && num(job.lastEpoch.epoch) > 0) {
    const e = job.lastEpoch;
    if (e.evaluated) { m.test_accuracy = num(e.testAccuracy); m.test_loss = num(e.testLoss); }
    if (has(e.valAccuracy)) m.val_accuracy = num(e.valAccuracy);
    if (has(e.valLoss)) m.val_loss = num(e.valLoss);
    m.train_loss = num(e.trainLoss);
  }
  // Multilabel and regression: the task's metrics by name; their accuracy fields are not
  // measured (a regression has none, a multilabel job's is in the map).
  if (jobTask(job) !== 'classification') {
    delete m.val_accuracy;
    delete m.test_accuracy;
  }
  // Every task's map, and a classification job's with the user's metrics (the same figures as
  // the fields above, plus those).
  const metrics = num(s.epochs) > 0 ? s.metrics : (job.lastEpoch || {}).metrics;
  Object.assign(m, metricNumbers(metrics));
  return m;
}

// Trials best first by `metric` ("auto", as mpsctl: val_accuracy when a trial measured it, else
// test_accuracy; a regression's val_r2 / test_r2, a multilabel job's val_macro_f1 /
// test_macro_f1, validation first); trials without a value last, in trial order; equal
// accuracies by their split's loss, lowest first (SWEEP_METRICS' tieBreak). `mode` 'max'
// ranks highest first, 'min' lowest first, 'auto' the metric's own way (mpsctl sweep --mode);
// a metric without a known way (a job's own) under 'auto' keeps trial order. Returns
// [metric, ranked, higher] (higher undefined: not ranked).
function rankTrials(trials, metric, mode = 'auto') {
  const rows = trials.map((job) => ({ job, m: trialMetrics(job) }));
  if (!metric || metric === 'auto') {
    const measured = (name) => rows.some((r) => r.m[name] !== undefined);
    metric = measured('val_accuracy') ? 'val_accuracy' : 'test_accuracy';
    for (const name of ['test_macro_f1', 'val_macro_f1', 'test_r2', 'val_r2']) if (measured(name)) metric = name;
  }
  const higher = mode === 'max' ? true : mode === 'min' ? false : metricSpec(metric).higher;
  // NaN ranks as unmeasured (last, in trial order): it orders against nothing.
  const valueOf = (name) => (r) => (Number.isNaN(r.m[name]) ? undefined : r.m[name]);
  const value = valueOf(metric);
  const tieBreak = (SWEEP_METRICS[metric] || {}).tieBreak;
  const loss = tieBreak ? valueOf(tieBreak) : () => undefined;
  const ranked = rows.map((r, i) => ({ ...r, i })).sort((a, b) => {
    const x = value(a), y = value(b);
    if ((x === undefined) !== (y === undefined)) return x === undefined ? 1 : -1;
    if (x === undefined || higher === undefined) return a.i - b.i;
    if (x === y) {
      const u = loss(a), v = loss(b);
      if ((u === undefined) !== (v === undefined)) return u === undefined ? 1 : -1;
      return u === undefined || u === v ? a.i - b.i : u - v;
    }
    return higher ? y - x : x - y;
  });
  return [metric, ranked, higher];
}

function sweepView(ctx, body, sweep, refresh) {
  const metric = el('select', { id: 'sweep-metric' }, el('option', { value: 'auto' }, 'auto'),
    Object.entries(SWEEP_METRICS).map(([k, v]) => el('option', { value: k }, v.label)));
  const mode = el('select', { id: 'sweep-mode' }, el('option', { value: 'auto' }, 'its own way'),
    el('option', { value: 'max' }, 'highest first'), el('option', { value: 'min' }, 'lowest first'));
  const modeNote = el('span', { id: 'sweep-mode-note', class: 'muted' });
  const compareLink = el('a', { id: 'sweep-compare', class: 'button' }, 'Compare all trials');
  const table = el('div', { class: 'scroll', id: 'sweep-table' });
  const parallel = el('div', { class: 'scroll', id: 'sweep-parallel' });
  const overlay = chartCard('Loss of every trial (EMA 0.6)', 'chart-sweep-loss');
  attachDownloads(overlay, () => overlayGraph, `sweep-${sweep.id}-loss`);
  let overlayGraph = null;
  body.append(el('div', { class: 'card' }, el('h2', {}, 'Trials'),
    el('div', { class: 'toolbar' }, el('label', {}, 'Rank by ', metric), el('label', {}, ' ', mode), modeNote, compareLink), table),
    el('div', { class: 'grid' }, el('div', { class: 'card' }, el('h2', {}, 'Parameters and metric'), parallel), overlay.card),
    el('div', { class: 'card' }, el('h2', {}, 'Job file'), el('pre', { id: 'spec-yaml' }, specYaml(sweep))));
  let trials = [];
  let timer = null;
  function draw() {
    const [used, ranked, higher] = rankTrials(trials, metric.value, mode.value);
    modeNote.textContent = higher === undefined
      ? `${metricSpec(used).label} is the job's own metric: choose highest or lowest first` : '';
    const paths = [...new Set(trials.flatMap((t) => ((t.trial || {}).parameters || []).map((p) => p.path)))];
    const taskMetrics = [...new Set(ranked.flatMap((r) => Object.keys(r.m)))].filter((k) => !SWEEP_METRICS[k]).sort();
    for (const k of taskMetrics) {
      if (![...metric.options].some((o) => o.value === k)) metric.append(el('option', { value: k }, metricSpec(k).label));
    }
    const shown = [...Object.keys(SWEEP_METRICS), ...taskMetrics].filter((k) => k === used || ranked.some((r) => r.m[k] !== undefined));
    const cell = (k, v) => (v === undefined ? '' : metricSpec(k).pct ? (100 * v).toFixed(2) + '%' : k === 'time_s' ? fmtDuration(v) : fmt(v, 4));
    table.replaceChildren(el('table', { id: 'trials' },
      el('thead', {}, el('tr', {}, el('th', { class: 'num' }, 'rank'), el('th', { class: 'num' }, 'trial'), el('th', { class: 'num' }, 'job'),
        paths.map((p) => el('th', { class: 'param' }, p)), el('th', {}, 'state'),
        shown.map((k) => el('th', { class: 'num' + (k === used ? ' ranked' : '') }, metricSpec(k).label)))),
      el('tbody', {}, ranked.map((r, rank) => {
        const values = Object.fromEntries(((r.job.trial || {}).parameters || []).map((p) => [p.path, p.value]));
        const best = rank === 0 && r.m[used] !== undefined && !Number.isNaN(r.m[used]) && higher !== undefined;
        return el('tr', { class: 'trial' + (best ? ' best' : ''), 'data-job-id': r.job.id },
          el('td', { class: 'num' }, String(rank + 1)), el('td', { class: 'num' }, String(num((r.job.trial || {}).index))),
          el('td', { class: 'num' }, jobLink(r.job.id)), paths.map((p) => el('td', { class: 'param' }, values[p] ?? '')),
          el('td', {}, stateBadge(r.job)),
          shown.map((k) => el('td', { class: 'num' + (k === used ? ' ranked' : '') }, cell(k, r.m[k]))));
      }))));
    compareLink.href = '#/compare?ids=' + ranked.map((r) => r.job.id).join(',') + '&metric=loss&smoothing=0.6';
    parallel.replaceChildren(parallelCoordinates(ranked, paths, used, higher !== undefined));
    ctx.counters.sweepRanked = ranked.map((r) => r.job.id);
    ctx.counters.sweepMetric = used;
    ctx.counters.sweepHigher = higher;
  }
  async function load() {
    const ids = sweep.trialJobIds || [];
    const loaded = await Promise.allSettled(ids.map((id) => api(`api/jobs/${encodeURIComponent(id)}`)));
    trials = loaded.filter((r) => r.status === 'fulfilled').map((r) => r.value);
    draw();
    drawOverlay();
    if (!ctx.alive) return;
    if (!TERMINAL.has(sweep.state) || trials.some((t) => !TERMINAL.has(t.state))) {
      timer = setTimeout(async () => { sweep = (await refresh()) || sweep; load(); }, POLL_MS);
    }
  }
  // Every trial's smoothed loss on one chart, labelled by its parameter values.
  async function drawOverlay() {
    const withSteps = trials.filter((t) => t.lastStep && num(t.lastStep.step) > 0);
    if (!withSteps.length) return;
    const series = await Promise.all(withSteps.map((t) => api(`api/jobs/${encodeURIComponent(t.id)}/series?metric=loss&max_points=1000&smoothing=0.6`).catch(() => null)));
    if (!ctx.alive) return;
    const byX = new Map();
    series.forEach((s, j) => {
      for (const [x, v] of (s ? s.series[0].smoothed : [])) {
        if (!byX.has(x)) byX.set(x, new Array(withSteps.length).fill(null));
        byX.get(x)[j] = v;
      }
    });
    const rows = [...byX.entries()].sort((a, b) => a[0] - b[0]).map(([x, values]) => [x, ...values]);
    if (!rows.length) return;
    const labels = ['step', ...withSteps.map((t) => `${t.id}: ` + (((t.trial || {}).parameters || []).map((p) => `${p.path.split('.').pop()}=${p.value}`).join(' ') || jobName(t)))];
    const options = { file: rows, labels, xlabel: 'step', ylabel: 'loss (EMA 0.6)' };
    if (!overlayGraph) overlayGraph = new Dygraph(overlay.box, rows, { colors: COLORS, legend: 'always', labelsDiv: overlay.legend, connectSeparatedPoints: true, ...themeOptions(), ...options });
    else overlayGraph.updateOptions(options);
    ctx.charts.sweepLoss = overlayGraph;
    ctx.counters.sweepOverlaySeries = withSteps.length;
  }
  metric.addEventListener('change', draw);
  mode.addEventListener('change', draw);
  load();
  return () => clearTimeout(timer);
}

// A parallel-coordinates plot (Inselberg) of a sweep's trials as SVG: one vertical axis per
// swept parameter (numbers on a log axis when all are positive and span more than 10×,
// otherwise linear; text values spaced evenly) and one for the ranking metric; one line per
// trial, the best one highlighted, the others fading with their rank.
function parallelCoordinates(ranked, paths, metric, rankedByMetric = true) {
  const NS = 'http://www.w3.org/2000/svg';
  const svg = (tag, attrs, text) => {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const axes = [...paths.map((p) => ({ name: p, value: (r) => Object.fromEntries(((r.job.trial || {}).parameters || []).map((q) => [q.path, q.value]))[p] })),
    { name: metricSpec(metric).label, value: (r) => r.m[metric] }];
  const width = Math.max(360, 160 * axes.length), height = 240, top = 30, bottom = 20, left = 60, right = 60;
  const xOf = (i) => left + (axes.length === 1 ? 0 : (i * (width - left - right)) / (axes.length - 1));
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width: '100%', height, id: 'parallel', role: 'img', 'aria-label': 'parallel coordinates of the trials' });
  const scales = axes.map((axis) => {
    const raw = ranked.map((r) => axis.value(r)).filter((v) => v !== undefined && v !== '');
    const nums = raw.map(Number);
    if (nums.length && nums.every(Number.isFinite)) {
      const lo = Math.min(...nums), hi = Math.max(...nums);
      const log = lo > 0 && hi / lo > 10;
      const f = log ? Math.log10 : (v) => v;
      const a = f(lo), b = f(hi);
      return { of: (v) => (b === a ? 0.5 : (f(Number(v)) - a) / (b - a)), ticks: [[lo, 0], [hi, 1]] };
    }
    const values = [...new Set(raw.map(String))];
    return { of: (v) => (values.length < 2 ? 0.5 : values.indexOf(String(v)) / (values.length - 1)), ticks: values.map((v, i) => [v, values.length < 2 ? 0.5 : i / (values.length - 1)]) };
  });
  const yOf = (t) => height - bottom - t * (height - top - bottom);
  const css = getComputedStyle(document.documentElement);
  const fg = css.getPropertyValue('--fg').trim() || '#000', muted = css.getPropertyValue('--muted').trim() || '#888';
  axes.forEach((axis, i) => {
    root.append(svg('line', { x1: xOf(i), x2: xOf(i), y1: top, y2: height - bottom, stroke: muted }));
    root.append(svg('text', { x: xOf(i), y: 14, 'text-anchor': 'middle', 'font-size': 11, fill: fg }, axis.name));
    for (const [v, t] of scales[i].ticks) {
      root.append(svg('text', { x: xOf(i) + 4, y: yOf(t) + 4, 'font-size': 10, fill: muted }, typeof v === 'number' ? fmt(v, 3) : v));
    }
  });
  [...ranked].reverse().forEach((r) => {
    const rank = ranked.indexOf(r);
    const points = axes.map((axis, i) => {
      const v = axis.value(r);
      return v === undefined || v === '' ? null : `${xOf(i)},${yOf(scales[i].of(v))}`;
    });
    if (points.some((p) => p === null)) return;  // Not measured yet.
    const best = rank === 0 && rankedByMetric;
    root.append(svg('polyline', { points: points.join(' '), fill: 'none', class: 'trial-line' + (best ? ' best' : ''), 'data-job-id': r.job.id,
      stroke: best ? COLORS[2] : COLORS[0], 'stroke-width': best ? 3 : 1.5, 'stroke-opacity': best ? 1 : Math.max(0.25, 1 - rank / ranked.length) }));
  });
  return root;
}

// ---------------------------------------------------------------------------------------------
// The spec as a job file (YAML), keys as the proto names them. Left out: request_id (a submit
// of the copy would return this job instead of queueing another) and what mpsd generated.

// Request fields that a copy leaves out and a comparison ignores.
const GENERATED_KEYS = new Set(['requestId']);

function yamlScalar(v) {
  // The JSON mapping spells 64-bit integers as strings: a job file spells them as numbers.
  if (typeof v === 'string' && /^-?\d+$/.test(v)) return v;
  if (typeof v === 'string') return /^[\w./:@+-]+$/.test(v) && !/^(true|false|null|yes|no|on|off|~|[-+]?[\d.]+(e[-+]?\d+)?)$/i.test(v) ? v : JSON.stringify(v);
  return String(v);
}
// `value` as block YAML; the keys of maps under a key in `verbatim` are written as they are
// (labels: user keys, sweep paths), others from lowerCamelCase to the proto's snake_case.
function toYaml(value, indent = '', verbatim = false) {
  const lines = [];
  for (const [key, v] of Object.entries(value)) {
    const name = verbatim ? yamlScalar(key) : camelToSnake(key);
    const inner = key === 'labels' || key === 'grid' || key === 'parameters';
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
      if (!Object.keys(v).length) continue;
      lines.push(`${indent}${name}:`, toYaml(v, indent + '  ', inner));
    } else if (Array.isArray(v)) {
      if (v.every((x) => typeof x !== 'object')) lines.push(`${indent}${name}: [${v.map(yamlScalar).join(', ')}]`);
      else for (const item of v) lines.push(`${indent}${name}:`, `${indent}- ` + toYaml(item, indent + '  ').trimStart());
    } else {
      lines.push(`${indent}${name}: ${yamlScalar(v)}`);
    }
  }
  return lines.join('\n');
}
// A sweep's parameter lists as job files write them: maps keyed by path.
function sweepForFile(sweep) {
  const byPath = (params) => Object.fromEntries((params || []).map(({ path, values, ...rest }) => [path, values && values.length ? values : rest]));
  const out = {};
  if (sweep.grid && sweep.grid.length) out.grid = byPath(sweep.grid);
  if (sweep.random && num(sweep.random.trials)) out.random = { ...sweep.random, parameters: byPath(sweep.random.parameters) };
  return out;
}
function specObject(job) {
  const spec = job.spec || {};
  const { trainJob, benchJob, evalJob, predictJob, sweep, ...rest } = spec;
  for (const key of GENERATED_KEYS) delete rest[key];
  // A trial's name is its sweep's with "/index" appended by mpsd (server/core/sweep.cc).
  if (job.trial && job.trial.sweepId && /\/\d+$/.test(rest.name || '')) delete rest.name;
  const kind = benchJob ? 'BenchJob' : evalJob ? 'EvalJob' : predictJob ? 'PredictJob' : 'TrainJob';
  const out = { kind, ...(trainJob || benchJob || evalJob || predictJob || {}), ...rest };
  if (sweep && Object.keys(sweep).length) out.sweep = sweepForFile(sweep);
  return out;
}
function specYaml(job) { return toYaml(specObject(job)) + '\n'; }

// ---------------------------------------------------------------------------------------------
// BenchJob: the seeds' table (models and batch sizes by devices, speedup last) and a bar chart.

function benchView(ctx, body, job, setFollower, refresh) {
  const rows = [];
  const table = el('div', { class: 'scroll', id: 'bench-table' });
  const measure = el('select', { id: 'bench-measure' }, el('option', { value: 'ms' }, 'ms per batch (p10–p90)'), el('option', { value: 'sps' }, 'samples/s'));
  // Bench times span orders of magnitude (0.5 ms to 30 s): a log scale by default.
  const logScale = el('input', { type: 'checkbox', id: 'bench-log', checked: true });
  const bars = chartCard('Bench', 'chart-bench', el('div', { class: 'toolbar' }, el('label', {}, 'Show ', measure),
    el('label', {}, logScale, ' log scale')));
  attachDownloads(bars, () => graph, `job-${job.id}-bench`);
  const yaml = el('pre', { id: 'spec-yaml' }, specYaml(job));
  // Rows expected: model × batch size × device × precision × mode, when the devices are named
  // (not "all") and one memory format is asked for; a progress bar until they are all in.
  const spec = (job.spec || {}).benchJob || {};
  const devices = spec.devices || [];
  const expected = devices.length && !devices.includes('all') && (spec.memoryFormats || []).length <= 1
    ? (spec.models || []).length * (spec.batchSizes || []).length * devices.length * Math.max(1, (spec.precisions || []).length) * (spec.mode === 'both' ? 2 : 1)
    : 0;
  const progress = el('div', { id: 'bench-progress' });
  body.append(el('div', { class: 'card' }, el('h2', {}, 'Rows'), progress, table), bars.card, el('div', { class: 'card' }, el('h2', {}, 'Job file'), yaml));
  let graph = null;
  measure.addEventListener('change', () => draw());
  logScale.addEventListener('change', () => draw());

  function draw() {
    const view = benchLayout(rows);
    table.replaceChildren(benchTable(view));
    ctx.counters.benchRows = rows.length;
    const text = expected ? `${rows.length} of ${expected} rows` : `${rows.length} rows`;
    progress.replaceChildren(expected && rows.length < expected
      ? el('div', { class: 'progress', title: text }, el('div', { style: `width:${(100 * rows.length / expected).toFixed(1)}%` }), el('span', {}, text))
      : el('p', { class: 'muted' }, text));
    if (!view.groups.length) return;
    const sps = measure.value === 'sps';
    const data = view.groups.map((group, i) => [i + 1, ...view.devices.map((device) => {
      const row = group.cells.get(device);
      if (!row || row.status !== 'OK') return sps ? null : [null, null, null];
      return sps ? num(row.samplesPerSecond) : [num(row.p10Ms), num(row.medianMs), num(row.p90Ms)];
    })]);
    const options = {
      file: data, labels: ['row', ...view.devices], customBars: !sps, plotter: barPlotter, labelsDiv: bars.legend,
      dateWindow: [0.4, view.groups.length + 0.6], includeZero: !logScale.checked, logscale: logScale.checked,
      ylabel: (sps ? 'samples/s' : 'ms per batch') + (logScale.checked ? ' (log)' : ''),
      // Each group's label gets its share of the width, in a smaller font, so that none is cut.
      axes: { x: { ticker: () => view.groups.map((g, i) => ({ v: i + 1, label: g.label })), valueFormatter: (x) => (view.groups[x - 1] || {}).label || '',
        axisLabelWidth: Math.max(40, Math.floor((bars.box.clientWidth - 60) / view.groups.length)), axisLabelFontSize: view.groups.length > 8 ? 9 : 11 } },
    };
    if (!graph) graph = new Dygraph(bars.box, data, { colors: COLORS, legend: 'always', ...themeOptions(), ...options });
    else graph.updateOptions(options);
    ctx.charts.bench = graph;
  }
  draw();
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
  // Bars stand on zero, or on the bottom of the plot on a log scale (which has no zero).
  const zero = g.getOption('logscale') ? e.plotArea.y + e.plotArea.h : g.toDomYCoord(0);
  for (let j = 0; j < series; j++) {
    ctx.fillStyle = COLORS[j % COLORS.length];
    ctx.strokeStyle = getComputedStyle(document.documentElement).getPropertyValue('--fg').trim() || '#24292f';
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

// The spec flattened to dotted key paths (job file names), arrays as one value each;
// request_id and generated fields left out (GENERATED_KEYS).
function flatten(value, prefix = '', out = {}) {
  for (const [key, v] of Object.entries(value)) {
    if (!prefix && GENERATED_KEYS.has(key)) continue;
    const path = prefix + (prefix.startsWith('labels.') || prefix === 'labels.' ? key : camelToSnake(key));
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

// Each job's legend: the values of the keys that vary between the jobs (a sweep's parameters,
// or the spec keys that differ, name and labels aside), e.g. "learning_rate=0.003 seed=2".
function legendNames(jobs, differences) {
  const keys = differences.map((d) => d.key).filter((k) => k !== 'name' && !k.startsWith('labels.'));
  return jobs.map((job, j) => {
    const parts = keys.slice(0, 3).map((k) => `${k.split('.').pop()}=${differences.find((d) => d.key === k).values[j]}`);
    return `${job.id}: ${parts.length ? parts.join(' ') : jobName(job) || jobModel(job)}`;
  });
}

function comparePage(ctx, main, params) {
  // ids= (also jobs=, as the issue that asked for it spelled it).
  const ids = (params.get('ids') || params.get('jobs') || '').split(',').map((s) => s.trim()).filter(Boolean);
  const followers = [];
  const metric = el('select', { id: 'compare-metric' }, [...STEP_METRICS, ...EPOCH_METRICS].map((m) => el('option', { value: m }, m)));
  const xAxis = el('select', { id: 'compare-x' }, el('option', { value: 'step' }, 'step'), el('option', { value: 'epoch' }, 'epoch'), el('option', { value: 'time' }, 'wall time (s)'));
  const smoothing = el('input', { type: 'range', min: '0', max: '0.99', step: '0.01', id: 'compare-smoothing' });
  const smoothingValue = el('span', {});
  const logScale = el('input', { type: 'checkbox', id: 'compare-log' });
  metric.value = params.get('metric') || 'loss';
  if (!metric.value) metric.value = 'loss';
  xAxis.value = params.get('x') || 'step';
  if (!xAxis.value) xAxis.value = 'step';
  smoothing.value = params.has('smoothing') ? params.get('smoothing') : '0';
  smoothingValue.textContent = smoothing.value;
  logScale.checked = params.get('log') === '1';
  const idsInput = el('input', { id: 'compare-ids', value: ids.join(','), size: 16, placeholder: '1,2,3' });
  const go = el('button', { onclick: () => { location.hash = '#/compare?' + query({ ids: idsInput.value.replace(/\s+/g, '') }); } }, 'Compare');
  const card = chartCard('Overlay', 'chart-compare');
  attachDownloads(card, () => graph, 'compare');
  const diff = el('div', { class: 'scroll', id: 'spec-diff' });
  const finals = el('div', { class: 'scroll', id: 'compare-finals' });
  const errors = el('div', { id: 'compare-errors', class: 'error' });
  main.append(el('h1', {}, 'Compare'), el('div', { class: 'toolbar' }, el('label', {}, 'Jobs ', idsInput), go,
    el('label', {}, 'Metric ', metric), el('label', {}, 'x ', xAxis), el('label', {}, 'Smoothing ', smoothing), smoothingValue,
    el('label', {}, logScale, ' log scale')), errors, card.card,
    el('div', { class: 'card' }, el('h2', {}, 'Final and best'), finals),
    el('div', { class: 'card' }, el('h2', {}, 'Spec keys that differ'), diff));
  // The view's state as its URL query, so that a copied URL opens the same view.
  function query(over = {}) {
    const q = new URLSearchParams({ ids: ids.join(','), metric: metric.value, x: xAxis.value, smoothing: smoothing.value, log: logScale.checked ? '1' : '', ...over });
    return [...q.entries()].filter(([, v]) => v !== '' && !(v === '0' && false)).map(([k, v]) => `${k}=${encodeURIComponent(v).replace(/%2C/g, ',')}`).join('&');
  }
  function syncUrl() { history.replaceState(null, '', '#/compare?' + query()); }
  if (ids.length < 1) { diff.append(el('p', { class: 'muted' }, 'Pick jobs in the jobs table, or type their ids.')); return {}; }
  let jobs = [];
  let legends = [];
  let graph = null;
  let generation = 0;

  async function draw() {
    if (!ctx.alive || !jobs.length) return;
    syncUrl();
    const mine = ++generation;
    const name = metric.value, x = xAxis.value, weight = Number(smoothing.value);
    const isEpoch = EPOCH_METRICS.includes(name);
    const series = await Promise.all(jobs.map((job) => api(`api/jobs/${encodeURIComponent(job.id)}/series?metric=${name}&max_points=2000` + (weight > 0 ? `&smoothing=${weight}` : ''))));
    if (mine !== generation) return;
    // One row per distinct x; each job's column holds its value there (null elsewhere).
    const byX = new Map();
    series.forEach((s, j) => {
      const job = jobs[j];
      const start = seconds(job.startedAt) || 0;
      const total = num((job.lastStep || {}).totalSteps), epochs = num(((job.spec || {}).trainJob || {}).epochs) || 1;
      const points = weight > 0 ? s.series[0].smoothed : s.series[0].points;
      for (const [px, value, timeUs] of points) {
        let xv = px;
        if (x === 'time') xv = +(timeUs / 1e6 - start).toFixed(3);
        else if (x === 'epoch' && !isEpoch) xv = total ? (px / total) * epochs : px;
        else if (x === 'step' && isEpoch) xv = total ? (px / epochs) * total : px;
        if (!byX.has(xv)) byX.set(xv, new Array(jobs.length).fill(null));
        byX.get(xv)[j] = logScale.checked && !(value > 0) ? null : value;
      }
    });
    const rows = [...byX.entries()].sort((a, b) => a[0] - b[0]).map(([xv, values]) => [xv, ...values]);
    const labels = [x, ...legends];
    ctx.counters.compareSeries = jobs.length;
    ctx.counters.comparePoints = series.map((s) => s.series[0].points.length);
    ctx.counters.compareLabels = legends;
    if (!rows.length) rows.push([0, ...jobs.map(() => null)]);
    const options = { file: rows, labels, xlabel: x === 'time' ? 'seconds since start' : x, ylabel: name + (weight > 0 ? ` (EMA ${weight})` : ''),
      drawPoints: isEpoch, pointSize: 3, logscale: logScale.checked };
    if (!graph) graph = new Dygraph(card.box, rows, { colors: COLORS, legend: 'always', labelsDiv: card.legend, connectSeparatedPoints: true, ...themeOptions(), ...options });
    else graph.updateOptions(options);
    ctx.charts.compare = graph;
  }
  function showTables() {
    // What each job ran with (its effective spec: defaults written out), so that an unset
    // learning rate and an explicit 0.001 for adam are the same value.
    const differences = specDifferences(jobs.map((job) => specObject({ ...job, spec: job.effectiveSpec || job.spec })));
    legends = legendNames(jobs, differences);
    ctx.counters.diffKeys = differences.map((d) => d.key);
    diff.replaceChildren(differences.length ? el('table', { class: 'diff' },
      el('thead', {}, el('tr', {}, el('th', {}, 'key'), jobs.map((job) => el('th', {}, jobLink(job.id, `job ${job.id}`))))),
      el('tbody', {}, differences.map((d) => el('tr', {}, el('td', {}, d.key), d.values.map((v) => el('td', {}, v))))))
      : el('p', { class: 'muted' }, 'The specs are the same.'));
    const shown = Object.keys(SWEEP_METRICS).filter((k) => jobs.some((job) => trialMetrics(job)[k] !== undefined));
    finals.replaceChildren(el('table', { id: 'compare-final-table' },
      el('thead', {}, el('tr', {}, el('th', {}, 'job'), el('th', {}, 'state'), shown.map((k) => el('th', { class: 'num' }, SWEEP_METRICS[k].label)), el('th', { class: 'num' }, 'best epoch'))),
      el('tbody', {}, jobs.map((job, j) => {
        const m = trialMetrics(job);
        const s = job.summary || {};
        return el('tr', {}, el('td', {}, jobLink(job.id, legends[j])), el('td', {}, stateBadge(job)),
          shown.map((k) => el('td', { class: 'num' }, m[k] === undefined ? '' : SWEEP_METRICS[k].pct ? (100 * m[k]).toFixed(2) + '%' : k === 'time_s' ? fmtDuration(m[k]) : fmt(m[k], 4))),
          el('td', { class: 'num' }, s.bestEpoch ? `${s.bestEpoch} (${s.monitor} ${fmt(num(s.bestValue), 4)})` : ''));
      }))));
  }
  // An unknown id is named, and the others are still drawn.
  Promise.allSettled(ids.map((id) => api(`api/jobs/${encodeURIComponent(id)}`))).then((loaded) => {
    jobs = loaded.filter((r) => r.status === 'fulfilled').map((r) => r.value);
    const failed = loaded.map((r, i) => (r.status === 'rejected' ? `job ${ids[i]}: ${r.reason.message}` : null)).filter(Boolean);
    errors.textContent = failed.join('; ');
    ctx.counters.compareErrors = failed;
    if (!jobs.length) return;
    showTables();
    draw();
    // Running jobs' curves grow: redraw when any of them gets events, at most every 2 s.
    let due = false;
    for (const job of jobs.filter((j) => !TERMINAL.has(j.state))) {
      followers.push(followEvents(ctx, job.id, { afterSeq: num(job.lastSeq), onEvent: () => {
        if (due) return;
        due = true;
        setTimeout(() => { due = false; draw(); }, POLL_MS);
      } }));
    }
  });
  metric.addEventListener('change', draw);
  xAxis.addEventListener('change', draw);
  logScale.addEventListener('change', draw);
  smoothing.addEventListener('input', () => { smoothingValue.textContent = smoothing.value; });
  smoothing.addEventListener('change', () => { smoothingValue.textContent = smoothing.value; draw(); });
  return { leave() { followers.forEach((f) => f.stop()); } };
}

start();
