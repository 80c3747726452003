// src/cli/options.cpp — placeholder
