// src/harness/runner.cpp — placeholder
