// The stepflow UI: a hash router over a few views, each refreshing itself
// while it is shown and the tab is visible.

import { ApiError, forgetKey, get, getKey, setKey, takeKeyFromFragment, tenantOf } from './api.js';
import { hideBanner, setSignIn, startHealth, stopHealth } from './core.js';
import { h } from './dom.js';
import { jobsView, jobView } from './jobs.js';
import { newJobView, resourceFormView, scheduleFormView } from './forms.js';
import { healthView, queuesView, resourcesView, schedulesView } from './others.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const signOut = document.getElementById('sign-out');

let current = null; // the shown view's AbortController: aborted when it goes
let linkKey = ''; // a link's key waiting for the person to say whether it replaces the kept one

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

// showKeySwitch asks whether a link's key replaces the kept one, showing
// the tenant each names; nothing changes until the person says so.
function showKeySwitch() {
  if (current) current.abort();
  const ctl = new AbortController();
  current = ctl;
  stopHealth();
  nav.hidden = true;
  signOut.hidden = true;
  hideBanner();
  const offered = linkKey;
  const keptTenant = h('strong', { id: 'key-kept-tenant' }, '…');
  const linkTenant = h('strong', { id: 'key-link-tenant' }, '…');
  const error = h('p', { id: 'key-switch-error', class: 'error', role: 'alert' });
  error.hidden = true;
  const done = (key) => {
    if (key) setKey(key);
    linkKey = '';
    route();
  };
  const switchButton = h('button', { type: 'button', id: 'key-switch', class: 'primary', disabled: true, onclick: () => done(offered) }, 'Switch');
  const keepButton = h('button', { type: 'button', id: 'key-keep', onclick: () => done('') }, 'Keep my key');
  main.replaceChildren(h('section', { id: 'key-question', class: 'card signin' },
    h('h1', null, 'Sign in as someone else?'),
    h('p', null, 'The link you opened holds another API key than the one this browser keeps.'),
    h('p', null, 'Signed in now as tenant ', keptTenant, '.'),
    h('p', null, 'The link signs in as tenant ', linkTenant, '.'),
    h('div', { class: 'actions' }, keepButton, switchButton),
    error));
  keepButton.focus();
  const show = (el, key, onTenant) => tenantOf(key, ctl.signal).then((t) => {
    el.textContent = t;
    if (onTenant) onTenant();
  }, (err) => {
    if (err.name === 'AbortError') return;
    el.textContent = '(unknown)';
    error.textContent = `${el === linkTenant ? "The link's key" : 'The kept key'}: ${err instanceof ApiError ? err.describe() : String(err)}`;
    error.hidden = false;
  });
  show(keptTenant, getKey());
  show(linkTenant, offered, () => { switchButton.disabled = false; }); // a key the API refuses is not offered
}

function route() {
  if (current) current.abort();
  current = null;
  if (!getKey()) {
    showSignIn();
    return;
  }
  if (linkKey) {
    showKeySwitch();
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
  // A resource or schedule is edited at #/<view>/<id>/edit, so that no
  // id (not even "new") is taken from them.
  const edit = parts[2] === 'edit' ? decodeURIComponent(parts[1]) : '';
  switch (view) {
    case 'jobs':
      if (parts[1]) jobView(ctx, decodeURIComponent(parts[1]));
      else jobsView(ctx);
      break;
    case 'new':
      newJobView(ctx);
      break;
    case 'resources':
      if (parts[1] === 'new') resourceFormView(ctx);
      else if (edit) resourceFormView(ctx, edit);
      else resourcesView(ctx);
      break;
    case 'schedules':
      if (parts[1] === 'new') scheduleFormView(ctx);
      else if (edit) scheduleFormView(ctx, edit);
      else schedulesView(ctx);
      break;
    case 'queues':
      queuesView(ctx);
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
// takeLink takes a #key= link's key: kept at once when none is, or held
// for the person to confirm (showKeySwitch).
function takeLink() {
  const offered = takeKeyFromFragment();
  if (offered) linkKey = offered;
}

window.addEventListener('hashchange', () => {
  takeLink(); // a #key= link opened in a tab that shows the UI already
  route();
});
takeLink();
route();
