// src/cli/run.cpp — placeholder
