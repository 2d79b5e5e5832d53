#!/bin/bash
printf 'def reverse(text):\n    return text[::-1]\n' > /app/reverse.py
