// src/metrics/bounds.cpp — placeholder
