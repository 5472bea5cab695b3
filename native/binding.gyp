# Native device probes for Kiwi, built with node-gyp (plain Node-API C, no C++ runtime needed).
# kiwi_membw: host memory read bandwidth with every core (electron/engine/device/memory-bandwidth.ts).
# kiwi_exec: execve(2) for the restart with huge pages (electron/engine/device/huge-pages.ts); not on Windows.
{
  "targets": [
    {
      "target_name": "kiwi_membw",
      "sources": ["src/membw.c"],
      "defines": ["NAPI_VERSION=8"],
      "cflags": ["-O3", "-std=c11"],
      "xcode_settings": { "GCC_OPTIMIZATION_LEVEL": "3", "OTHER_CFLAGS": ["-std=c11"] },
      "msvs_settings": { "VCCLCompilerTool": { "Optimization": 2 } },
      "conditions": [
        ["OS!='win'", { "libraries": ["-lpthread"] }]
      ]
    }
  ],
  "conditions": [
    ["OS!='win'", {
      "targets": [
        {
          "target_name": "kiwi_exec",
          "sources": ["src/exec.c"],
          "defines": ["NAPI_VERSION=8"],
          "cflags": ["-O2", "-std=c11"],
          "xcode_settings": { "OTHER_CFLAGS": ["-std=c11"] }
        }
      ]
    }]
  ]
}
