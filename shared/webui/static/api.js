// The API key and calls to the stepflow HTTP API, on the page's own origin.

const keyName = 'stepflow.key';

// takeKeyFromFragment takes a key passed as #key=... (a link that opens the
// UI signed in) and removes it from the address bar and history. With no
// key kept, it is kept; with another one kept, nothing is replaced: it is
// answered, for the person to confirm first (a link must not sign anyone
// in as someone else unseen). It answers '' when there is nothing to ask.
export function takeKeyFromFragment() {
  // Not URLSearchParams: it reads '+' as a space, and a key may hold '+'.
  const m = /^#key=([^&]*)/.exec(location.hash);
  if (!m) return '';
  let key = m[1];
  try {
    key = decodeURIComponent(key);
  } catch {
    // Not percent-encoded: taken as it is.
  }
  key = key.trim();
  history.replaceState(null, '', location.pathname + location.search + '#/jobs');
  const kept = getKey();
  if (key === '' || key === kept) return '';
  if (!kept) {
    setKey(key);
    return '';
  }
  return key;
}

// tenantOf answers the tenant a key names, as the API says (GET
// v1/health answers the caller's tenant).
export async function tenantOf(key, signal) {
  const health = await get('v1/health', { key, signal });
  return health.tenant;
}

export function getKey() {
  return localStorage.getItem(keyName) || '';
}

export function setKey(key) {
  localStorage.setItem(keyName, key);
}

export function forgetKey() {
  localStorage.removeItem(keyName);
}

// ApiError is an error answer: {"error": {"code", "message", "field"}}.
export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
  // describe says what went wrong as the API said it (its message names
  // the field).
  describe() {
    return `${this.status} ${this.code}: ${this.message}`;
  }
}

// maxRetries bounds how often call repeats an answer that asks to be
// tried again later: a 429 (throttled, or past the tenant's long-poll
// bound) or a 503 contended (the write lost every race and changed
// nothing), each after its Retry-After and a little jitter.
const maxRetries = 3;

function retryable(err) {
  return err instanceof ApiError && (err.status === 429 || (err.status === 503 && err.code === 'contended'));
}

// pause waits ms, or rejects when signal aborts.
function pause(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) {
      reject(new DOMException('aborted', 'AbortError'));
      return;
    }
    const t = setTimeout(resolve, ms);
    if (signal) {
      signal.addEventListener('abort', () => {
        clearTimeout(t);
        reject(new DOMException('aborted', 'AbortError'));
      }, { once: true });
    }
  });
}

// call makes one request and answers its JSON body, or throws ApiError.
// Paths are relative ("v1/jobs"): the page is served at <base>/ui, so they
// resolve against the API's own base, whatever stage or mapping it has.
export async function call(method, path, body, opts = {}) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await callOnce(method, path, body, opts);
    } catch (err) {
      if (!retryable(err) || attempt >= maxRetries) throw err;
      const secs = err.retryAfter > 0 ? err.retryAfter : 1;
      await pause(secs * 1000 * (1 + Math.random() / 4), opts.signal);
    }
  }
}

async function callOnce(method, path, body, { signal, key = getKey() } = {}) {
  const headers = { Accept: 'application/json' };
  if (key) headers.Authorization = `Bearer ${key}`;
  const init = { method, headers, signal, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    throw new ApiError(0, 'network', `the API did not answer: ${err.message}`);
  }
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    // Not JSON: an error from something in front of the API.
  }
  if (!res.ok) {
    const e = data && data.error;
    const err = e && e.message
      ? new ApiError(res.status, e.code || 'error', e.message, e.field)
      : new ApiError(res.status, 'error', (data && data.message) || text || res.statusText);
    err.retryAfter = Number.parseInt(res.headers.get('Retry-After') || '', 10);
    throw err;
  }
  return data;
}

export const get = (path, opts) => call('GET', path, undefined, opts);
export const post = (path, body, opts) => call('POST', path, body, opts);

// jobPath answers the path of a job route; ids are escaped, though the API
// makes them safe already.
export function jobPath(id, ...rest) {
  return ['v1/jobs', encodeURIComponent(id), ...rest.map(encodeURIComponent)].join('/');
}
