// The page's only way to the server: the public /v1 API, with the key typed at the login.
// The key lives in sessionStorage (this tab only, gone when it closes); an admin key may pick
// another tenant, sent as X-Memlane-Tenant.

const KEY = "memlane.inspector.key";
const TENANT = "memlane.inspector.tenant";

export class ApiError extends Error {
  constructor(status, body) {
    const detail = body && body.error ? body.error : {};
    super(detail.message || `HTTP ${status}`);
    this.status = status;
    this.code = detail.code || "http_error";
    this.body = body;
  }
}

export const credentials = {
  get key() { return sessionStorage.getItem(KEY); },
  set key(value) { value ? sessionStorage.setItem(KEY, value) : sessionStorage.removeItem(KEY); },
  get tenant() { return sessionStorage.getItem(TENANT); },
  set tenant(value) { value ? sessionStorage.setItem(TENANT, value) : sessionStorage.removeItem(TENANT); },
  clear() { sessionStorage.removeItem(KEY); sessionStorage.removeItem(TENANT); },
};

function headers(json) {
  const out = {};
  if (credentials.key) out.Authorization = `Bearer ${credentials.key}`;
  if (credentials.tenant) out["X-Memlane-Tenant"] = credentials.tenant;
  if (json) out["Content-Type"] = "application/json";
  return out;
}

/** Call the API: `api("GET", "/v1/memories", {query: {user_id}})`; resolves to the JSON body. */
export async function api(method, path, { query, body } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, String(value));
  }
  const response = await fetch(url, {
    method,
    headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

export const get = (path, query) => api("GET", path, { query });
export const post = (path, body, query) => api("POST", path, { body, query });
export const patch = (path, body, query) => api("PATCH", path, { body, query });
export const del = (path, query) => api("DELETE", path, { query });

/** A path segment, escaped: `/v1/memories/${seg(id)}`. */
export const seg = (value) => encodeURIComponent(value);
