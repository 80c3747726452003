// src/harness/registry.cpp — placeholder
