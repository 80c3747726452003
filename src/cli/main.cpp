// src/cli/main.cpp — placeholder
