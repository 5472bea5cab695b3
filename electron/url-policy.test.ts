import { describe, expect, it } from 'vitest';
import { isExternalUrlAllowed, isPermissionAllowed, isSameOrigin, originOf } from './url-policy.js';

const ui = 'http://127.0.0.1:49152';

describe('isSameOrigin', () => {
  it.each([
    ['the UI itself', `${ui}/`, true],
    ['a path and fragment of the UI', `${ui}/assets/index.js#token=x`, true],
    ['the origin without a path', ui, true],
    ['upper case', 'HTTP://127.0.0.1:49152/', true],
    ['user info that makes a prefix test pass', `${ui}@evil.example/`, false],
    ['a longer port with the same prefix', 'http://127.0.0.1:491520/', false],
    ['another port', 'http://127.0.0.1:49153/', false],
    ['https instead of http', 'https://127.0.0.1:49152/', false],
    ['localhost for 127.0.0.1', 'http://localhost:49152/', false],
    ['a subdomain look-alike', 'http://127.0.0.1.evil.example:49152/', false],
    ['garbage', 'not a url', false],
    ['a data: URL', 'data:text/html,<script>', false],
  ])('%s', (_what, url, expected) => expect(isSameOrigin(url, ui)).toBe(expected));

  it('has no origin for opaque URLs', () => {
    expect(originOf('file:///etc/passwd')).toBeNull();
    expect(originOf('about:blank')).toBeNull();
  });
});

describe('isPermissionAllowed', () => {
  it.each([
    ['clipboard-sanitized-write', `${ui}/`, true],
    ['clipboard-sanitized-write', `${ui}@evil.example/`, false],
    ['clipboard-sanitized-write', 'https://evil.example/', false],
    ['media', `${ui}/`, false],
    ['geolocation', `${ui}/`, false],
    ['notifications', `${ui}/`, false],
    ['clipboard-read', `${ui}/`, false],
    ['openExternal', `${ui}/`, false],
  ])('%s from %s: %s', (permission, url, expected) => expect(isPermissionAllowed(permission, url, ui)).toBe(expected));
});

describe('isExternalUrlAllowed', () => {
  it.each([
    ['https://github.com/kiwi/kiwi', true],
    ['https://huggingface.co/x/y.gguf', true],
    ['http://example.com/', false],
    ['file:///etc/passwd', false],
    ['javascript:alert(1)', false],
    ['smb://server/share', false],
    ['ms-settings:privacy', false],
    ['https://user:pass@example.com/', false],
    ['not a url', false],
  ])('%s: %s', (url, expected) => expect(isExternalUrlAllowed(url)).toBe(expected));
});
