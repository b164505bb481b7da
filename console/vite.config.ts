// The console's build: into the Python package (served by the REST gateway at /, no Node.js at run time).
import react from "@vitejs/plugin-react";
import { defineConfig } from "vitest/config";

export default defineConfig({
  plugins: [react()],
  base: "/",
  build: {
    outDir: "../entrypoints/gateways/console_dist",
    emptyOutDir: true,
    assetsInlineLimit: 0, // no data: URLs for scripts or styles (the CSP allows 'self' only)
    modulePreload: { polyfill: false }, // (an inline script otherwise)
    chunkSizeWarningLimit: 900,
  },
  test: {
    environment: "jsdom",
    include: ["src/**/*.test.{ts,tsx}"],
  },
});
