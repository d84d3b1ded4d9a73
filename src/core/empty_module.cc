// Stands in for a module with no sources yet; see src/CMakeLists.txt.
