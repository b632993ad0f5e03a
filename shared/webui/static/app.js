// The stepflow UI: a hash router over a few views, each refreshing itself
// while it is shown and the tab is visible.

import { ApiError, forgetKey, get, getKey, setKey, takeKeyFromFragment } from './api.js';
import { hideBanner, setSignIn, startHealth, stopHealth } from './core.js';
import { h } from './dom.js';
import { jobsView, jobView } from './jobs.js';
import { healthView, resourcesView, schedulesView } from './others.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const signOut = document.getElementById('sign-out');

let current = null; // the shown view's AbortController: aborted when it goes

function markNav(view) {
  for (const a of nav.querySelectorAll('a')) {
    if (a.dataset.view === view) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

function showSignIn(message) {
  if (current) current.abort();
  current = null;
  stopHealth();
  nav.hidden = true;
  signOut.hidden = true;
  hideBanner();
  const input = h('input', {
    id: 'signin-key', name: 'key', type: 'password', autocomplete: 'current-password',
    placeholder: 'API key', required: true, spellcheck: 'false',
  });
  const error = h('p', { id: 'signin-error', class: 'error', role: 'alert' }, message || '');
  error.hidden = !message;
  const button = h('button', { type: 'submit', class: 'primary' }, 'Sign in');
  const form = h('form', {
    id: 'signin', class: 'card signin',
    onsubmit: async (e) => {
      e.preventDefault();
      const key = input.value.trim();
      if (!key) return;
      button.disabled = true;
      try {
        await get('v1/health', { key }); // proves the key before keeping it
        setKey(key);
        route();
      } catch (err) {
        error.textContent = err instanceof ApiError ? err.describe() : String(err);
        error.hidden = false;
        input.select(); // the next try replaces it
      } finally {
        button.disabled = false;
      }
    },
  },
  h('h1', null, 'Sign in'),
  h('p', { class: 'muted' }, 'Paste an API key, the one you send as "Authorization: Bearer <key>". It is kept in this browser only.'),
  h('label', { for: 'signin-key' }, 'API key'),
  input,
  button,
  error);
  main.replaceChildren(form);
  input.focus();
}

function route() {
  if (current) current.abort();
  current = null;
  if (!getKey()) {
    showSignIn();
    return;
  }
  const ctl = new AbortController();
  current = ctl;
  nav.hidden = false;
  signOut.hidden = false;
  hideBanner();
  startHealth();
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?');
  const params = new URLSearchParams(query || '');
  const parts = path.split('/').filter(Boolean);
  const view = parts[0] || 'jobs';
  markNav(view);
  main.replaceChildren();
  const ctx = { signal: ctl.signal, params, main };
  switch (view) {
    case 'jobs':
      if (parts[1]) jobView(ctx, decodeURIComponent(parts[1]));
      else jobsView(ctx);
      break;
    case 'resources':
      resourcesView(ctx);
      break;
    case 'schedules':
      schedulesView(ctx);
      break;
    case 'health':
      healthView(ctx);
      break;
    default:
      location.hash = '#/jobs';
  }
}

setSignIn(showSignIn);
signOut.addEventListener('click', () => {
  forgetKey();
  showSignIn();
});
window.addEventListener('hashchange', () => {
  takeKeyFromFragment(); // a #key= link opened in a tab that shows the UI already
  route();
});
takeKeyFromFragment();
route();
