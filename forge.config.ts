// Electron Forge configuration for `electron-forge start` during development. Distributable
// builds use electron-builder (see package.json "build"); Forge's own types are not installed,
// so the shape is declared here.
interface ForgeConfig {
  packagerConfig: { name: string; executableName: string; asar: { unpack: string }; icon?: string };
  makers: Array<{ name: string; config: Record<string, unknown> }>;
}

const config: ForgeConfig = {
  packagerConfig: {
    name: 'Kiwi',
    executableName: 'kiwi',
    // Native code (onnxruntime, our bandwidth probe) cannot load from inside the asar archive.
    asar: { unpack: '**/*.{node,so,so.*,dll,dylib}' },
    icon: 'build/icon',
  },
  makers: [
    { name: '@electron-forge/maker-zip', config: {} },
    { name: '@electron-forge/maker-deb', config: {} },
  ],
};

export default config;
