// The one error type for expected failures: a stable code for programs, a message for people
// that says what to do. Bugs are not KiwiErrors; they are assertions that fail loudly.

export type KiwiErrorCode =
  | 'USAGE'
  | 'FILE_NOT_FOUND'
  | 'GGUF_INVALID'
  | 'GGUF_UNSUPPORTED'
  | 'MODEL_UNSUPPORTED'
  | 'TOKENIZER_UNSUPPORTED'
  | 'TEMPLATE_ERROR'
  | 'DOWNLOAD_FAILED'
  | 'CHECKSUM_MISMATCH'
  | 'TEST_MODEL_MISSING'
  | (string & {});

export class KiwiError extends Error {
  readonly code: KiwiErrorCode;
  readonly details: Readonly<Record<string, unknown>>;

  constructor(code: KiwiErrorCode, message: string, details: Record<string, unknown> = {}) {
    super(message);
    this.name = 'KiwiError';
    this.code = code;
    this.details = details;
  }

  toJSON(): { code: string; message: string } & Record<string, unknown> {
    return { code: this.code, message: this.message, ...this.details };
  }
}

export function isKiwiError(err: unknown, code?: KiwiErrorCode): err is KiwiError {
  return err instanceof KiwiError && (code === undefined || err.code === code);
}
