// One script for the Airflow UI to import(): React, React Router and Chakra come from the UI itself, which puts them
// on globalThis for its plugins, so the page shares the UI's theme (dark mode included) and router.
import { defineConfig } from "vite";

const shared = {
  react: "React",
  "react-dom": "ReactDOM",
  "react/jsx-runtime": "ReactJSXRuntime",
  "react-router-dom": "ReactRouterDOM",
  "@chakra-ui/react": "ChakraUI",
};

export default defineConfig({
  define: { "process.env.NODE_ENV": JSON.stringify("production") },
  build: {
    outDir: "../airflow_iceberg/plugins/static",
    emptyOutDir: true,
    lib: { entry: "src/main.jsx", formats: ["iife"], name: "AirflowIcebergTables", fileName: () => "iceberg-tables.js" },
    rollupOptions: { external: Object.keys(shared), output: { globals: shared } },
  },
});
