// src/cli/show.cpp — placeholder
