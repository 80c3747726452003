// src/scenario/diagnostics.cpp — placeholder
