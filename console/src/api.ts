// The REST gateway as the console calls it: the bearer token on every request, the error envelope as ApiError.

export class ApiError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

export type Json = Record<string, unknown>;

export async function api<T = Json>(
  token: string,
  path: string,
  options: { method?: string; body?: unknown; signal?: AbortSignal } = {},
): Promise<T> {
  const headers: Record<string, string> = { Authorization: `Bearer ${token}` };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method: options.method ?? "GET",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: options.signal,
  });
  let body: Json;
  try {
    body = (await response.json()) as Json;
  } catch {
    throw new ApiError("internal", `the gateway answered ${response.status} without JSON`, response.status);
  }
  if (!response.ok || body.success === false) {
    const error = (body.error ?? {}) as { code?: string; message?: string };
    throw new ApiError(error.code ?? "internal", error.message ?? `HTTP ${response.status}`, response.status);
  }
  return body as T;
}

export function query(fields: Record<string, string | number | undefined>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(fields)) if (value !== undefined && value !== "") params.set(name, String(value));
  const text = params.toString();
  return text ? `?${text}` : "";
}
