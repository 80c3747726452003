// src/cli/list.cpp — placeholder
