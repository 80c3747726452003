// src/report/console.cpp — placeholder
