// The plugin's FastAPI app, mounted at <base>/iceberg. The UI's session cookie authenticates each request.
import { useEffect, useState } from "react";

export const apiUrl = (path, params = {}) => {
  const url = new URL(`iceberg/api/${path}`, document.baseURI);
  for (const [key, value] of Object.entries(params)) if (value !== "" && value != null) url.searchParams.set(key, value);
  return url.href;
};

async function answer(response) {
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(typeof body.detail === "string" ? body.detail : `${response.status} ${response.statusText}`);
  return body;
}

// GET `url` whenever it (or `reload`) changes: { data, error, loading }, the last data kept while the next loads.
export function useJson(url, reload = 0) {
  const [state, setState] = useState({ data: undefined, error: undefined, loading: true });
  useEffect(() => {
    const abort = new AbortController();
    setState((s) => ({ ...s, loading: true }));
    fetch(url, { credentials: "same-origin", signal: abort.signal })
      .then(answer)
      .then((data) => setState({ data, error: undefined, loading: false }))
      .catch((error) => abort.signal.aborted || setState((s) => ({ ...s, error, loading: false })));
    return () => abort.abort();
  }, [url, reload]);
  return state;
}

// POST a form, as the force-open form's fields: the browser adds its Origin, the body carries the signed token.
export const postForm = (url, fields) =>
  fetch(url, { method: "POST", credentials: "same-origin", body: new URLSearchParams(fields) }).then(answer);
