// What every view shares: polling, error display, running actions and the
// tenant's health.

import { ApiError, forgetKey, get, getKey } from './api.js';

const banner = document.getElementById('banner');
const badge = document.getElementById('health-badge');

let signIn = () => {};

// setSignIn names what shows the sign-in box (app.js), for a refused key.
export function setSignIn(fn) {
  signIn = fn;
}

export function showBanner(text) {
  banner.textContent = text;
  banner.hidden = false;
}

export function hideBanner() {
  banner.hidden = true;
}

export function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener('abort', done);
  });
}

// whenVisible waits while the tab is hidden: nobody is looking, so nothing
// is fetched.
export async function whenVisible(signal) {
  while (document.hidden && !signal.aborted) {
    await new Promise((resolve) => {
      document.addEventListener('visibilitychange', resolve, { once: true });
      signal.addEventListener('abort', resolve, { once: true });
    });
  }
}

// failed deals with an error a view met: a refused key signs out with the
// API's message; anything else shows in the banner. It answers whether
// the view should go on.
export function failed(err) {
  if (err && err.name === 'AbortError') return false;
  if (err instanceof ApiError && err.status === 401) {
    // The first refusal signs out; others of the same key, in flight at
    // the time, change nothing (the sign-in box may hold typing by then).
    if (getKey()) {
      forgetKey();
      signIn(err.describe());
    }
    return false;
  }
  showBanner(err instanceof ApiError ? err.describe() : String(err));
  return true;
}

// poller runs fn now and again ms (a number, or a function answering one)
// after each run ends, until signal aborts; the kick() it answers runs fn
// again at once (after a filter changed or an action).
export function poller(signal, ms, fn) {
  let wake = null;
  let dirty = false;
  (async () => {
    while (!signal.aborted) {
      dirty = false;
      try {
        await fn();
        hideBanner();
      } catch (err) {
        if (!failed(err)) return;
      }
      if (dirty || signal.aborted) continue;
      const nap = new AbortController();
      wake = () => nap.abort();
      signal.addEventListener('abort', wake, { once: true });
      await sleep(typeof ms === 'function' ? ms() : ms, nap.signal);
      signal.removeEventListener('abort', wake);
      wake = null;
      await whenVisible(signal);
    }
  })();
  return () => {
    dirty = true;
    if (wake) wake();
  };
}

// act runs an action from a button: the button waits while it runs, the
// API's error message shows in errorEl, and done(answer) takes the result.
export async function act(button, errorEl, request, done) {
  button.disabled = true;
  errorEl.hidden = true;
  try {
    done(await request());
  } catch (err) {
    if (err && err.name === 'AbortError') return;
    if (err instanceof ApiError && err.status === 401) {
      failed(err);
      return;
    }
    errorEl.textContent = err instanceof ApiError ? err.describe() : String(err);
    errorEl.hidden = false;
  } finally {
    button.disabled = false;
  }
}

// The tenant's health, fetched every 10 s while signed in; views that show
// it listen.
let health = null;
let healthLoop = null;
const listeners = new Set();

export function onHealth(fn, signal) {
  listeners.add(fn);
  signal.addEventListener('abort', () => listeners.delete(fn), { once: true });
  if (health) fn(health);
}

export function startHealth() {
  if (healthLoop) return;
  const ctl = new AbortController();
  healthLoop = ctl;
  poller(ctl.signal, 10000, async () => {
    const answer = await get('v1/health', { signal: ctl.signal });
    if (ctl.signal.aborted) return;
    health = answer;
    badge.textContent = health.status;
    badge.className = `badge health-${health.status}`;
    for (const fn of listeners) fn(health);
  });
}

export function stopHealth() {
  if (healthLoop) healthLoop.abort();
  healthLoop = null;
  health = null;
  badge.textContent = '';
  badge.className = 'badge';
}
