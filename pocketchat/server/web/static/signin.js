// signin.js — the sign-in page: sends the API key to POST /web/api/signin
// (JSON) and goes to "/" when the server accepts it (204).

const form = document.getElementById('signin-form');
const key = document.getElementById('key');
const submit = document.getElementById('signin');
const error = document.getElementById('signin-error');

function showError(text) {
  error.textContent = text || '';
}

async function signIn(event) {
  event.preventDefault();
  const value = key.value;
  if (!value) {
    showError('Type the key first.');
    key.focus();
    return;
  }
  submit.disabled = true;
  showError('');
  try {
    const res = await fetch('/web/api/signin', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify({ key: value }),
    });
    if (res.ok) {
      location.href = '/';
      return;
    }
    if (res.status === 401 || res.status === 403) {
      showError('That key is not right. Try again.');
      key.select();
    } else {
      let message = `The server answered ${res.status}.`;
      try {
        const data = await res.json();
        if (data && data.error && data.error.message) message = String(data.error.message);
      } catch (e) { /* not JSON */ }
      showError(message);
    }
  } catch (e) {
    showError('The server cannot be reached.');
  }
  submit.disabled = false;
}

form.addEventListener('submit', signIn);
