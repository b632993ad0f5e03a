// Resources, schedules, queues and health.

import { ApiError, get, post } from './api.js';
import { act, onHealth, poller } from './core.js';
import { dollars, h, pill, timeEl } from './dom.js';

function jobLink(id) {
  return h('a', { class: 'mono', href: `#/jobs/${encodeURIComponent(id)}` }, id);
}

// table answers a list table in a box that scrolls sideways when the
// table is wider than the screen, so the page never does.
function table(id, headers, body) {
  return h('div', { class: 'scroll' },
    h('table', { class: 'list', id }, h('thead', null, h('tr', null, headers.map((c) => h('th', null, c)))), body));
}

// titled answers a page's title with an action beside it.
function titled(title, ...actions) {
  return h('div', { class: 'titled' }, h('h1', null, title), ...actions);
}

function empty(tbody, cols, text) {
  tbody.replaceChildren(h('tr', null, h('td', { colspan: cols, class: 'empty' }, text)));
}

// ---------------------------------------------------------------- resources

export function resourcesView({ signal, main }) {
  const tbody = h('tbody');
  main.append(
    titled('Resources', h('a', { class: 'button primary', href: '#/resources/new', id: 'new-resource' }, 'New resource')),
    h('p', { class: 'muted' }, 'Slots steps take with their leases.'),
    table('resources', ['resource', 'capabilities', 'labels', 'in use', 'holders', 'waiting', ''], tbody));
  poller(signal, 5000, async () => {
    const { resources } = await get('v1/resources', { signal });
    if (!resources.length) return empty(tbody, 7, 'No resources.');
    tbody.replaceChildren(...resources.map((r) => h('tr', { 'data-resource': r.id },
      h('td', { class: 'mono' }, r.id),
      h('td', null, (r.capabilities || []).map((c) => h('span', { class: 'tag' }, c))),
      h('td', null, Object.entries(r.labels || {}).map(([k, v]) => h('span', { class: 'tag' }, `${k}=${v}`))),
      h('td', null,
        h('meter', { min: 0, max: r.capacity, value: r.in_use, high: r.capacity, title: `${r.in_use} of ${r.capacity} in use` }),
        ` ${r.in_use}/${r.capacity}`),
      h('td', null, r.holders.length ? h('ul', { class: 'plain' }, r.holders.map((x) =>
        h('li', null, jobLink(x.job_id), ` ${x.step_id}, since `, timeEl(x.since), ', expires ', timeEl(x.expires_at)))) : h('span', { class: 'muted' }, 'none')),
      h('td', null, r.waiting && r.waiting.length ? h('ul', { class: 'plain' }, r.waiting.map((w) =>
        h('li', null, jobLink(w.job), ` ${w.step}, since `, timeEl(w.since)))) : h('span', { class: 'muted' }, 'none')),
      h('td', null, h('a', { class: 'button', href: `#/resources/${encodeURIComponent(r.id)}/edit`, 'data-action': 'edit' }, 'Edit')))));
  });
}

// ---------------------------------------------------------------- schedules

export function schedulesView({ signal, main }) {
  const tbody = h('tbody');
  const cursors = [''];
  let page = 0;
  let next = '';
  const error = h('p', { class: 'error', role: 'alert' });
  error.hidden = true;
  const newer = h('button', { type: 'button', onclick: () => { page--; kick(); } }, '← previous');
  const older = h('button', { type: 'button', onclick: () => { cursors[page + 1] = next; page++; kick(); } }, 'next →');
  const pager = h('div', { class: 'pager' }, newer, older);
  main.append(
    titled('Schedules', h('a', { class: 'button primary', href: '#/schedules/new', id: 'new-schedule' }, 'New schedule')),
    error,
    table('schedules', ['schedule', 'when', 'overlap', 'state', 'next tick', 'last run', 'runs', 'skipped', ''], tbody),
    pager);

  const kick = poller(signal, 5000, async () => {
    const q = new URLSearchParams({ limit: '50' });
    if (cursors[page]) q.set('cursor', cursors[page]);
    const at = page;
    const answer = await get('v1/schedules?' + q, { signal });
    if (at !== page) return;
    next = answer.next_cursor || '';
    newer.disabled = page === 0;
    older.disabled = !next;
    pager.hidden = page === 0 && !next;
    if (!answer.schedules.length) return empty(tbody, 9, 'No schedules.');
    tbody.replaceChildren(...answer.schedules.map((sc) => {
      const path = `v1/schedules/${encodeURIComponent(sc.id)}/${sc.paused ? 'resume' : 'pause'}`;
      const toggle = h('button', { type: 'button', 'data-action': sc.paused ? 'resume' : 'pause', onclick: () =>
        act(toggle, error, () => post(path, undefined, { signal }), () => kick()) }, sc.paused ? 'Resume' : 'Pause');
      return h('tr', { 'data-schedule': sc.id },
        h('td', null, h('a', { class: 'mono', href: `#/jobs?schedule=${encodeURIComponent(sc.id)}`, title: 'its runs' }, sc.id)),
        h('td', null, sc.cron ? `cron ${sc.cron} (${sc.time_zone || 'UTC'})` : `every ${sc.every}`),
        h('td', null, sc.overlap),
        h('td', null, pill(sc.paused ? 'PAUSED' : 'ACTIVE'), sc.last_error ? h('div', { class: 'error small' }, sc.last_error) : null),
        h('td', null, sc.paused ? h('span', { class: 'muted' }, 'paused') : timeEl(sc.next_at)),
        h('td', null, sc.last_job_id ? [jobLink(sc.last_job_id), ' ', timeEl(sc.last_run_at)] : h('span', { class: 'muted' }, 'none yet')),
        h('td', { class: 'num' }, sc.runs),
        h('td', { class: 'num' }, sc.skipped),
        h('td', { class: 'row-actions' }, toggle, h('a', { class: 'button', href: `#/schedules/${encodeURIComponent(sc.id)}/edit`, 'data-action': 'edit' }, 'Edit')));
    }));
  });
}

// ---------------------------------------------------------------- queues

export function queuesView({ signal, main }) {
  const tbody = h('tbody');
  main.append(
    h('h1', null, 'Queues'),
    h('p', { class: 'muted' }, 'The worker queues jobs have named, and the steps in each: visible (a claim can take them), in flight (taken), delayed (a retry\'s backoff).'),
    table('queues', ['queue', 'visible', 'in flight', 'delayed', 'by priority', 'last named'], tbody));
  poller(signal, 5000, async () => {
    const { queues } = await get('v1/queues', { signal });
    if (!queues.length) return empty(tbody, 6, 'No worker queues.');
    tbody.replaceChildren(...queues.map((q) => h('tr', { 'data-queue': q.name },
      h('td', null, h('a', { class: 'mono', href: `#/jobs?queue=${encodeURIComponent(q.name)}`, title: 'its jobs' }, q.name)),
      h('td', { class: 'num' }, q.visible),
      h('td', { class: 'num' }, q.in_flight),
      h('td', { class: 'num' }, q.delayed),
      h('td', null, (q.lanes || []).map((l) => h('span', { class: 'tag' }, `P${l.priority}: ${l.visible}/${l.in_flight}/${l.delayed}`))),
      h('td', null, timeEl(q.last_used)))));
  });
}

// ---------------------------------------------------------------- health

export function healthView({ signal, main }) {
  const body = h('div', { id: 'health' }, h('p', { class: 'muted' }, 'Loading…'));
  const daily = h('section', { class: 'card', id: 'daily-budget', hidden: true });
  main.append(h('h1', null, 'Health'), body, daily);
  dailyBudget(signal, daily);
  onHealth((hl) => {
    const fig = (label, value) => h('div', { class: 'tile' }, h('span', { class: 'n' }, value), h('span', { class: 'label' }, label));
    body.replaceChildren(
      h('p', { class: ['status', `health-${hl.status}`] }, hl.status),
      hl.reasons && hl.reasons.length ? h('ul', null, hl.reasons.map((r) => h('li', null, r))) : h('p', { class: 'muted' }, 'Nothing to report.'),
      ...(hl.notes || []).map((n) => h('p', { class: 'muted' }, n)),
      h('div', { class: 'tiles' },
        fig('success rate, 24 h', hl.success_rate === undefined ? '-' : `${(hl.success_rate * 100).toFixed(1)}%`),
        fig('backlog', hl.backlog),
        fig('waiting on a person', hl.blocked),
        fig('completed, 24 h', hl.completed_24h),
        fig('failed, 24 h', hl.failed_24h),
        fig('cancelled, 24 h', hl.cancelled_24h),
        fig('average run time, 24 h', hl.avg_duration_seconds === undefined ? '-' : `${hl.avg_duration_seconds.toFixed(1)} s`),
        fig('last heartbeat', hl.last_heartbeat === undefined ? 'never' : new Date(hl.last_heartbeat).toLocaleTimeString())),
      h('p', { class: 'muted' }, 'Your tenant\'s own figures; they may lag other functions by up to 10 s.'));
  }, signal);
}

// dailyBudget shows what the tenant spent today of its daily budget, in
// el; hidden while it has none (an operator sets it), or where the API
// has no budget route.
function dailyBudget(signal, el) {
  poller(signal, 10000, async () => {
    let b;
    try {
      b = await get('v1/budget', { signal });
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        el.hidden = true;
        return;
      }
      throw err;
    }
    if (b.daily_usd === undefined || b.daily_usd === null) {
      el.hidden = true;
      return;
    }
    const over = b.exceeded || b.spent_today_usd >= b.daily_usd;
    el.replaceChildren(...[
      h('h2', null, 'Daily budget'),
      h('p', { id: 'daily-spent' }, `${dollars(b.spent_today_usd)} spent today of ${dollars(b.daily_usd)}`),
      h('meter', { min: 0, max: b.daily_usd, value: Math.min(b.spent_today_usd, b.daily_usd), low: b.daily_usd * 0.5, high: b.daily_usd * 0.8, optimum: 0, title: `${dollars(b.spent_today_usd)} of ${dollars(b.daily_usd)}` }),
      over && h('p', { class: 'error', id: 'daily-exceeded' }, 'Spent: a new job is refused (402) until the budget resets.'),
      h('p', { class: 'muted' }, 'Resets ', timeEl(b.resets_at), '.'),
    ].filter(Boolean));
    el.hidden = false;
  });
}
